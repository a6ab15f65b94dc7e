"""The bundled data: where ``data/trunk`` and ``data/corpus`` are, and the one corpus reader.

``data/`` is not a Python package: it sits at the repository root beside the packages
(``experts/``, ``trainer/``, ...). With the editable install the project uses
(``pip install -e .``), ``worx/`` is imported from the repository itself, so the
repository root is the parent of this file's folder. A non-editable install does not carry
``data/``; then ``$WORX_BUNDLED_DATA`` names the folder that holds ``trunk/`` and ``corpus/``,
and failing that ``./data`` (a checkout as the working directory) is tried.

A corpus is a directory of JSON-lines files (``<domain>.jsonl`` or ``<domain>.jsonl.gz``),
one object per line with a ``text`` and, in the bundled one, ``id``, ``domain`` and
``source``. :func:`read_lines` is the only code that opens those files: library code,
benches and tests all read the corpus through it (or :func:`domain_texts`).

Examples
--------
>>> trunk_dir().name, corpus_dir().name
('trunk', 'corpus')
>>> [p.name for p in corpus_files()][:2]
['biomedical.jsonl.gz', 'fiction_austen.jsonl.gz']
>>> texts = domain_texts("news", 2, skip=1, max_chars=20)
>>> len(texts), all(len(t) <= 20 for t in texts)
(2, True)
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worx.errors import UserError

DATA_DIR_ENV = "WORX_BUNDLED_DATA"
_SUFFIXES = (".jsonl.gz", ".jsonl")


class CorpusError(UserError, ValueError):
    """A corpus directory or line that cannot be read (the message says where and why)."""


class CorpusNotFoundError(CorpusError, FileNotFoundError):
    """A corpus directory with no ``*.jsonl`` / ``*.jsonl.gz`` file in it."""


def data_dir() -> Path:
    """The folder holding the bundled ``trunk/`` and ``corpus/``.

    Resolution order: ``$WORX_BUNDLED_DATA``; ``<repository root>/data`` (editable install);
    ``./data``. The first that exists wins.

    Raises
    ------
    FileNotFoundError
        If none of them exists, with the places tried and how to fix it.
    """
    tried: list[Path] = []
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        tried.append(Path(env).expanduser())
    tried.append(Path(__file__).resolve().parent.parent / "data")
    tried.append(Path.cwd() / "data")
    for candidate in tried:
        if candidate.is_dir():
            return candidate.resolve()
    raise FileNotFoundError(
        "the bundled data folder (data/ with trunk/ and corpus/) was not found; tried "
        + ", ".join(str(p) for p in tried)
        + f". Install the project editable from a checkout (pip install -e .), or set "
        f"${DATA_DIR_ENV} to the checkout's data/ folder"
    )


def trunk_dir() -> Path:
    """The bundled default trunk: a Hugging Face model directory (``data/trunk``).

    Load it like any trunk, e.g.
    ``AutoModelForCausalLM.from_pretrained(trunk_dir(), dtype=torch.float32)``
    (the weights are stored in float16 to stay small; ask for float32 on CPU).

    Raises
    ------
    FileNotFoundError
        If the data folder cannot be found (see :func:`data_dir`).
    """
    return data_dir() / "trunk"


def corpus_dir() -> Path:
    """The bundled labelled corpus (``data/corpus/*.jsonl.gz``)."""
    return data_dir() / "corpus"


# A preset names a corpus made of bundled parts: (folder under data/, its domains or None
# for all; "trunk" stands for the domains the bundled trunk was trained on).
CORPUS_PRESETS: dict[str, tuple[tuple[str, str | None], ...]] = {
    "bundled": (("corpus", None),),
    # the trunk's own domains first, then the 40-domain corpus (data/corpus_many)
    "many": (("corpus", "trunk"), ("corpus_many", None)),
}


def trunk_domains() -> list[str]:
    """The bundled corpus domains the bundled trunk was trained on (its pretrain report)."""
    report = json.loads((trunk_dir() / "pretrain_report.json").read_text(encoding="utf-8"))
    return list(report["train_domains"])


def corpus_parts(spec: str | Path | None = None) -> list[tuple[Path, list[str] | None]]:
    """The ``(directory, domains or None)`` parts a corpus ``spec`` names: a directory, a
    preset name of :data:`CORPUS_PRESETS` (``many``: the trunk's domains and the 40-domain
    corpus), or None (the bundled corpus). An existing directory wins over a preset name.
    """
    if spec is None:
        return [(corpus_dir(), None)]
    path = Path(spec).expanduser()
    if path.is_dir():
        return [(path, None)]
    preset = CORPUS_PRESETS.get(str(spec))
    if preset is None:
        return [(path, None)]  # reading it says what is wrong with it
    parts: list[tuple[Path, list[str] | None]] = []
    for folder, domains in preset:
        chosen = trunk_domains() if domains == "trunk" else None
        parts.append((data_dir() / folder, chosen))
    return parts


def file_domain(path: Path) -> str:
    """The domain a corpus file is named for: ``news.jsonl.gz`` -> ``news``."""
    return path.name.split(".jsonl")[0]


def corpus_files(directory: str | Path | None = None) -> list[Path]:
    """The corpus files of ``directory`` (default: the bundled corpus), sorted by name.

    Raises
    ------
    CorpusNotFoundError
        If it holds no ``*.jsonl`` or ``*.jsonl.gz`` file (also a ``FileNotFoundError``).
    """
    root = Path(directory) if directory is not None else corpus_dir()
    files = sorted(p for p in root.glob("*.jsonl*") if p.name.endswith(_SUFFIXES))
    if not files:
        raise CorpusNotFoundError(
            f"{root} holds no *.jsonl or *.jsonl.gz files; point at a corpus "
            "directory (one JSON object with a 'text' field per line)"
        )
    return files


@dataclass(frozen=True)
class CorpusLine:
    """One document of a corpus file, as stored."""

    path: Path  # the file it came from
    number: int  # its line number in that file, from 1
    body: dict[str, Any]  # the JSON object; body["text"] is a non-empty string

    @property
    def text(self) -> str:
        return self.body["text"]

    @property
    def domain(self) -> str:
        """The file's domain (the ``domain`` field may name another label)."""
        return file_domain(self.path)


def read_lines(
    directory: str | Path | None = None, domains: Iterable[str] | None = None
) -> Iterator[CorpusLine]:
    """Every document of the corpus in ``directory`` (default: bundled; a preset name reads
    its parts, :func:`corpus_parts`), file by file.

    Files come in name order, lines in file order; blank lines are skipped. ``domains``
    keeps only the files named for them (``news`` reads ``news.jsonl[.gz]``).

    Raises
    ------
    CorpusNotFoundError
        If the directory holds no corpus file.
    CorpusError
        For a domain in ``domains`` without a file, or a line that is not a JSON object
        with a non-empty string ``text``.
    """
    files = [
        path
        for folder, names in corpus_parts(directory)
        for path in corpus_files(folder)
        if names is None or file_domain(path) in names
    ]
    if domains is not None:
        wanted = set(domains)
        missing = wanted - {file_domain(p) for p in files}
        if missing:
            raise CorpusError(
                f"no corpus file for domain(s) {sorted(missing)} in {files[0].parent} "
                f"(have {sorted(file_domain(p) for p in files)})"
            )
        files = [p for p in files if file_domain(p) in wanted]
    for path in files:
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    body = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise CorpusError(f"{path}:{number}: not JSON ({exc})") from exc
                text = body.get("text") if isinstance(body, dict) else None
                if not isinstance(text, str) or not text.strip():
                    raise CorpusError(f"{path}:{number}: needs a non-empty string field 'text'")
                yield CorpusLine(path, number, body)


def domain_texts(
    domain: str,
    count: int | None = None,
    skip: int = 0,
    max_chars: int | None = None,
    directory: str | Path | None = None,
) -> list[str]:
    """``count`` texts (None: all) of one corpus domain after the first ``skip``, each
    cut to ``max_chars`` characters (None: whole)."""
    out: list[str] = []
    for i, line in enumerate(read_lines(directory, domains=[domain])):
        if count is not None and len(out) >= count:
            break
        if i >= skip:
            out.append(line.text[:max_chars])
    return out
