"""Replay files into ``<prefix>.docs`` through the ingest stage, at least once, resumable.

Loop: read ``batch_size`` items, run each through :class:`~ingest.stage.NormaliseStage`,
send its ``Doc``/``DeadLetter`` records to the sink (a :class:`worx.sink.Sink`; the
command hands it a Kafka publisher), flush it (it raises unless every record was
delivered), and only then write the checkpoint (atomically: temp file, fsync, rename)
with how many items of each file are done and the stage's dedup window. A worker killed
at any point restarts from the last checkpoint, so at most one batch is produced twice;
the stage's dedup window, restored from the checkpoint, does not see those ids, so the
duplicates reach the topic and are counted by whoever reads it (keyed by ``doc_id``,
they are harmless downstream).
"""

from __future__ import annotations

import csv
import json
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ingest.config import IngestConfig
from ingest.readers import FileReader, RawInput
from ingest.stage import NormaliseStage, _lookup
from worx.atomic import atomic_write_json
from worx.errors import UserError
from worx.sink import Sink
from worx.stage import Emit, Message

log = logging.getLogger(__name__)

CHECKPOINT_VERSION = 1


MAPPING_SAMPLE = 50  # items of a file looked at before ingesting it, to check the mapping


class IngestFileError(RuntimeError):
    """A file could not be read (not gzip though named so, truncated, unreadable)."""


class MappingError(UserError, ValueError):
    """The field mapping matches nothing in a file: every input would be dead-lettered."""


@dataclass
class IngestReport:
    files: int = 0
    inputs: int = 0  # items read (after skipping those a checkpoint says are done)
    resumed_skipped: int = 0  # items skipped because the checkpoint covered them
    bytes_read: int = 0
    seconds: float = 0.0
    counters: dict[str, int] = field(default_factory=dict)  # the stage's counters

    @property
    def docs(self) -> int:
        return self.counters.get("docs", 0)

    @property
    def dead_letters(self) -> dict[str, int]:
        return {k[4:]: v for k, v in self.counters.items() if k.startswith("dlq:")}


class RateLimiter:
    """At most ``rate`` items per second on average (token bucket, 1 s burst)."""

    def __init__(self, rate: float | None) -> None:
        self.rate = rate
        self._allowance = rate or 0.0
        self._last = time.monotonic()

    def wait(self) -> None:
        if not self.rate:
            return
        now = time.monotonic()
        self._allowance = min(self.rate, self._allowance + (now - self._last) * self.rate)
        self._last = now
        if self._allowance < 1.0:
            time.sleep((1.0 - self._allowance) / self.rate)  # pacing, not synchronisation
            self._last = time.monotonic()
            self._allowance = 0.0
        else:
            self._allowance -= 1.0


class FileIngestor:
    """Ingest files through the stage into Kafka; see the module docstring.

    Parameters
    ----------
    config: the ``[ingest]`` section (mapping, limits, batch size).
    sink: where the ``docs``/``dlq`` records go (``send``, then ``flush``, which raises
        unless they were all delivered).
    fmt: file format for every file (None: detect each from its suffix).
    rate: at most this many items per second (None: as fast as possible).
    checkpoint: JSON file for resuming (None: no resume).
    target: identifies the destination (bootstrap + prefix); a checkpoint written for
        another target is ignored with a warning, since its offsets mean nothing there.
    on_progress: called after each batch with (file, bytes read of it, report).
    """

    def __init__(
        self,
        config: IngestConfig,
        sink: Sink,
        fmt: str | None = None,
        rate: float | None = None,
        checkpoint: str | os.PathLike[str] | None = None,
        target: str = "",
        on_progress: Callable[[Path, int, IngestReport], None] | None = None,
    ) -> None:
        self.config = config
        self.sink = sink
        self.fmt = fmt
        self.limiter = RateLimiter(rate)
        self.checkpoint = Path(checkpoint) if checkpoint else None
        self.target = target
        self.on_progress = on_progress
        self.stage = NormaliseStage(config, source_format="json")
        self.state: dict[str, Any] = {"version": CHECKPOINT_VERSION, "target": target, "files": {}}
        self.report = IngestReport()
        self._load_checkpoint()
        self._counters_at_start = self.stage.counters.copy()

    def run(self, paths: Sequence[str | os.PathLike[str]]) -> IngestReport:
        start = time.monotonic()
        readers = check_files(paths, self.fmt, self.config)  # before anything is sent
        for reader in readers:
            self._ingest_file(reader)
            self.report.files += 1
        self.report.seconds = time.monotonic() - start
        self.report.counters = self._run_counters()
        return self.report

    def _ingest_file(self, reader: FileReader) -> None:
        key = str(reader.path.resolve())
        stat = reader.path.stat()
        entry = self.state["files"].get(key)
        fingerprint = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
        if entry and {k: entry.get(k) for k in fingerprint} != fingerprint:
            log.warning("%s changed since the checkpoint; ingesting it from the start", key)
            entry = None
        if entry and entry.get("complete"):
            log.info("%s: already ingested according to the checkpoint", key)
            self.report.resumed_skipped += entry["done"]
            return
        done = entry["done"] if entry else 0
        entry = {**fingerprint, "done": done, "complete": False}
        self.state["files"][key] = entry
        self.stage.source = f"file:{reader.path.name}"
        topic = f"file:{reader.path}"
        is_json = reader.fmt == "jsonl"
        pending = 0
        count = done
        for index, item in _guarded(reader):
            if index < done:
                self.report.resumed_skipped += 1
                continue
            self.limiter.wait()
            message = Message(value=item.value, topic=topic, offset=item.line)
            emits = self._process(message, item, is_json)
            for emit in emits:
                self.sink.send(emit.topic, emit.key, emit.record)
            self.report.inputs += 1
            count = index + 1
            pending += 1
            if pending >= self.config.batch_size:
                entry["done"] = count
                self._commit(reader)
                pending = 0
        entry["done"] = count
        entry["complete"] = True
        self.report.bytes_read += reader.size
        self._commit(reader)

    def _process(self, message: Message, item: RawInput, is_json: bool) -> list[Emit]:
        try:
            if item.error is not None:
                return [self.stage.dead_letter(message, *item.error)]
            if item.obj is not None:
                return self.stage.process_object(message, item.obj)
            if is_json:
                return self.stage.process(message)
            return self.stage.process_text(message)
        except Exception as exc:  # a bug must not stop the ingest: keep the input, say why
            log.exception("ingest stage failed on %s line %d", message.topic, message.offset)
            return [self.stage.dead_letter(message, "stage_error", f"{type(exc).__name__}: {exc}")]

    def _commit(self, reader: FileReader) -> None:
        """Flush (raises unless all delivered), then persist the checkpoint: the
        at-least-once point."""
        self.sink.flush()
        if self.checkpoint is not None:
            self.state["stage"] = self.stage.snapshot()
            atomic_write_json(self.checkpoint, self.state)
        if self.on_progress:
            self.report.counters = self._run_counters()
            self.on_progress(reader.path, reader.position, self.report)

    def _run_counters(self) -> dict[str, int]:
        """The stage's counters for this run only (a restored checkpoint carries earlier ones)."""
        delta = self.stage.counters.copy()
        delta.subtract(self._counters_at_start)
        return {k: v for k, v in delta.items() if v}

    def _load_checkpoint(self) -> None:
        if self.checkpoint is None or not self.checkpoint.exists():
            return
        try:
            state = json.loads(self.checkpoint.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise CheckpointError(
                f"checkpoint {self.checkpoint} is unreadable ({exc})", "delete it to start over"
            ) from exc
        if state.get("version") != CHECKPOINT_VERSION:
            raise CheckpointError(
                f"checkpoint {self.checkpoint} has version {state.get('version')!r}, this build "
                f"writes {CHECKPOINT_VERSION}",
                "delete it to start over",
            )
        if state.get("target") != self.target:
            log.warning(
                "checkpoint %s was written for %r, not %r; starting over",
                self.checkpoint,
                state.get("target"),
                self.target,
            )
            return
        self.state = state
        self.stage.restore(state.get("stage", {}))


class CheckpointError(UserError, ValueError):
    """A --checkpoint file this build cannot resume from."""


def check_files(
    paths: Sequence[str | os.PathLike[str]], fmt: str | None, config: IngestConfig
) -> list[FileReader]:
    """A reader per file, once :func:`check_mapping` found the mapping matches each."""
    readers = [FileReader(p, fmt, config.text_unit) for p in paths]
    for reader in readers:
        check_mapping(reader, config)
    return readers


def check_mapping(reader: FileReader, config: IngestConfig) -> None:
    """Raise :class:`MappingError` if the first :data:`MAPPING_SAMPLE` objects of a JSON-lines
    or CSV/TSV file all lack ``config.text_field`` (and, for CSV, a header without a set
    ``domain_field``), listing the fields found and suggesting the likeliest text field.
    Plain text, unreadable files and files without objects are left to the ingest itself."""
    if reader.fmt == "text":
        return
    objects: list[dict[str, Any]] = []
    try:
        for index, item in enumerate(reader):
            if index >= MAPPING_SAMPLE:
                break
            obj = item.obj
            if obj is None and item.error is None and reader.fmt == "jsonl":
                try:
                    obj = json.loads(item.value)
                except (ValueError, RecursionError):
                    continue
            if isinstance(obj, dict):
                objects.append(obj)
    except (OSError, EOFError, UnicodeError, csv.Error):
        return  # the ingest reports it, with how far it got
    if not objects:
        return
    fields = list(dict.fromkeys(name for obj in objects for name in obj))
    kind = "column" if reader.fmt in ("csv", "tsv") else "field"
    found = f"{kind}s found: {', '.join(fields[:20])}{' ...' if len(fields) > 20 else ''}"
    if not any(_lookup(obj, config.text_field) is not None for obj in objects):
        guess = _likeliest_text(objects, fields)
        hint = f"pass --text-field {guess}" if guess else "pass --text-field NAME"
        where = "in the header" if kind == "column" else f"in the first {len(objects)} objects"
        raise MappingError(
            f"{reader.path}: no {kind} {config.text_field!r} (the text) {where}; {found}",
            f"{hint} (or set ingest.text_field)",
        )
    if kind == "column" and config.domain_field and config.domain_field not in fields:
        raise MappingError(
            f"{reader.path}: no column {config.domain_field!r} (the domain label); {found}",
            "pass --domain-field NAME of one of them, or leave it unset (ingest.domain_field)",
        )


def _likeliest_text(objects: list[dict[str, Any]], fields: list[str]) -> str | None:
    """The field whose string values are longest on average in ``objects``."""
    lengths = {
        name: sum(len(v) for obj in objects if isinstance(v := obj.get(name), str))
        for name in fields
    }
    best = max(fields, key=lambda name: lengths[name], default=None)
    return best if best is not None and lengths[best] > 0 else None


def _guarded(reader: FileReader) -> Iterator[tuple[int, RawInput]]:
    """enumerate(reader), turning read errors into one clear IngestFileError."""
    index = -1
    try:
        for index, item in enumerate(reader):
            yield index, item
    except (OSError, EOFError, UnicodeError, csv.Error) as exc:
        raise IngestFileError(
            f"cannot read {reader.path} after {index + 1} inputs ({type(exc).__name__}: {exc}); "
            "everything before was ingested and, with --checkpoint, a rerun resumes there"
        ) from exc
