"""Scoring forwards shared by concurrent requests.

Each request submits its rows (token ids, per-row expert weights, and the experts those
weights name, resolved from the table the request read) and waits; one thread gathers what
is waiting into one right-padded forward of the mixture, each row with its own experts, and
hands every request its rows' losses (and logits where asked). Right padding leaves each
row's real positions as they are alone (attention is causal; positions count from 0), so a
row's numbers equal its forward alone within float tolerance.

The thread waits up to ``window_s`` for more rows only while other requests are on their
way (:meth:`ScoreBatcher.caller` counts them): one client alone never waits for company.
A forward that fails is re-run request by request, so one bad request fails only itself.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import torch

from experts.expert import Expert
from experts.mixture import Mixture, Weights
from experts.trunk import Trunk

PAD_RATIO = 1.25


@dataclass
class _Submission:
    input_ids: torch.Tensor  # (R, T)
    weights: Weights  # R rows
    experts: Mapping[str, Expert]  # every id the weights name
    want_logits: bool
    done: threading.Event = field(default_factory=threading.Event)
    losses: torch.Tensor | None = None  # (R, T-1)
    logits: torch.Tensor | None = None  # (R, T, V)
    error: BaseException | None = None


class ScoreBatcher:
    """One thread that runs the scoring forwards of every request on ``trunk``.

    Parameters
    ----------
    window_s : how long a forward waits for more rows after the first (while requests are
        on their way).
    max_rows : most rows in one forward (a submission is never split: one larger than this
        runs alone).
    """

    def __init__(self, trunk: Trunk, window_s: float = 0.002, max_rows: int = 16) -> None:
        self.trunk = trunk
        self.window_s = float(window_s)
        self.max_rows = int(max_rows)
        self.forwards = 0
        self._queue: queue.Queue[_Submission] = queue.Queue()
        self._callers = 0
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def caller(self) -> Iterator[None]:
        """Mark a request on its way to :meth:`token_losses` (it may submit or not)."""
        with self._lock:
            self._callers += 1
        try:
            yield
        finally:
            with self._lock:
                self._callers -= 1

    def token_losses(
        self,
        input_ids: torch.Tensor,
        weights: Weights,
        experts: Mapping[str, Expert],
        want_logits: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(R, T-1)`` next-token losses of ``input_ids (R, T)`` under ``weights`` (and the
        ``(R, T, V)`` logits with ``want_logits``), from a forward shared with others."""
        if len(weights) != input_ids.shape[0]:
            raise ValueError(f"{len(weights)} weights for {input_ids.shape[0]} rows")
        submission = _Submission(input_ids, list(weights), experts, want_logits)
        self._start()
        self._queue.put(submission)
        submission.done.wait()
        if submission.error is not None:
            raise submission.error
        assert submission.losses is not None
        return submission.losses, submission.logits

    # ------------------------------------------------------------------ the thread
    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="score-batcher", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            rows = batch[0].input_ids.shape[0]
            deadline = time.monotonic() + self.window_s
            while rows < self.max_rows:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    left = deadline - time.monotonic()
                    if left <= 0 or not self._others_coming(len(batch)):
                        break
                    try:
                        nxt = self._queue.get(timeout=left)
                    except queue.Empty:
                        break
                if rows + nxt.input_ids.shape[0] > self.max_rows:
                    self._forward_or_each(batch)
                    batch, rows = [nxt], 0
                    deadline = time.monotonic() + self.window_s
                else:
                    batch.append(nxt)
                rows += nxt.input_ids.shape[0]
            self._forward_or_each(batch)

    def _others_coming(self, gathered: int) -> bool:
        with self._lock:
            return self._callers > gathered

    def _forward_or_each(self, batch: list[_Submission]) -> None:
        for group in by_length(batch):
            self._forward_group(group)

    def _forward_group(self, batch: list[_Submission]) -> None:
        try:
            self._forward(batch)
        except Exception as exc:  # noqa: BLE001 - handed to the requests that caused it
            if len(batch) == 1:
                batch[0].error = exc
            else:
                for submission in batch:
                    self._forward_group([submission])
                return
        for submission in batch:
            submission.done.set()

    def _forward(self, batch: list[_Submission]) -> None:
        lengths = [s.input_ids.shape[1] for s in batch]
        longest = max(lengths)
        total = sum(s.input_ids.shape[0] for s in batch)
        device = self.trunk.device
        pad = self.trunk.tokenizer.pad_token_id or 0
        ids = torch.full((total, longest), pad, dtype=torch.long, device=device)  # (B, T)
        mask = torch.zeros((total, longest), dtype=torch.long, device=device)  # (B, T)
        weights: Weights = []
        experts: dict[str, Expert] = {}
        keep: list[int] = []  # the rows whose logits a request wants
        at = 0
        for submission, length in zip(batch, lengths, strict=True):
            n = submission.input_ids.shape[0]
            ids[at : at + n, :length] = submission.input_ids
            mask[at : at + n, :length] = 1
            weights.extend(submission.weights)
            experts.update(submission.experts)
            if submission.want_logits:
                keep.extend(range(at, at + n))
            at += n
        padded = min(lengths) < longest
        with torch.no_grad():
            losses, kept = Mixture(self.trunk, experts).token_losses_chunked(
                ids, mask if padded else None, weights, keep
            )  # (B, T-1), (k, T, V)
        self.forwards += 1
        at = kept_at = 0
        for submission, length in zip(batch, lengths, strict=True):
            n = submission.input_ids.shape[0]
            submission.losses = losses[at : at + n, : length - 1]
            if submission.want_logits:
                submission.logits = kept[kept_at : kept_at + n, :length]
                kept_at += n
            at += n


def by_length(batch: list[_Submission]) -> list[list[_Submission]]:
    """``batch`` in groups of similar length, shortest first: a group's longest text is at
    most ``PAD_RATIO`` times its shortest, so padding wastes little of a forward (on a CPU,
    scoring is compute-bound: a padded position costs what a real one does)."""
    groups: list[list[_Submission]] = []
    for submission in sorted(batch, key=lambda s: s.input_ids.shape[1]):
        length = submission.input_ids.shape[1]
        if groups and length <= PAD_RATIO * groups[-1][0].input_ids.shape[1]:
            groups[-1].append(submission)
        else:
            groups.append([submission])
    return groups


class BatchedMixture:
    """What the likelihood step needs of a :class:`Mixture` (``token_losses``), run through
    ``batcher`` with the experts of ``table``."""

    def __init__(self, batcher: ScoreBatcher, table: Mapping[str, Expert]) -> None:
        self.batcher = batcher
        self.table = table

    def token_losses(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, weights: Weights
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if attention_mask is not None:
            raise ValueError("the batched mixture pads rows itself: pass no attention mask")
        losses, _ = self.batcher.token_losses(input_ids, weights, experts_of(self.table, weights))
        return losses, torch.ones_like(losses)


def experts_of(table: Mapping[str, Expert], weights: Weights) -> dict[str, Expert]:
    """The experts ``weights`` name, loaded (and verified) from ``table`` now, in the
    request's thread: a refusal is the request's, before anything is submitted."""
    return {eid: table[eid] for row in weights for eid, w in row.items() if w != 0.0}
