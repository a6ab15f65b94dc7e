"""The fixed IDF table of the default embedder: fit once offline, ship as JSON, never refit.

Only features with document frequency >= ``min_df`` are stored (sorted uint64 feature
hashes and their IDF); every other feature is rare and gets ``idf_max = log(1 / min_df)``.
The file is JSON with the two arrays base64-encoded (little-endian), so loading it runs
no pickle and no code.

Rebuild (deterministic for a given corpus)::

    python -m router.idf data/corpus router/idf_table.json
"""

from __future__ import annotations

import argparse
import base64
import functools
import hashlib
import json
import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from router.features import SHAPE_NGRAMS, feature_blocks, normalise_text, shape_hashes

log = logging.getLogger(__name__)

DEFAULT_TABLE = Path(__file__).with_name("idf_table.json")


@dataclass(frozen=True)
class IdfTable:
    hashes: np.ndarray  # (F,) uint64, sorted: features frequent enough to be damped
    idf: np.ndarray  # (F,) float32: log((1 + n_docs) / (1 + df))
    idf_max: float  # weight of every feature not in the table (rarer than min_df)
    n_docs: int
    min_df: float
    char_ngrams: tuple[int, ...]
    max_chars: int
    shape_ngrams: tuple[int, ...] = ()  # form n-gram orders counted too (router.features)

    @classmethod
    def empty(cls) -> IdfTable:
        """No IDF: every feature weighs 1."""
        return cls(np.empty(0, np.uint64), np.empty(0, np.float32), 1.0, 0, 0.0, (), 0)

    @functools.cached_property
    def sha256(self) -> str:
        digest = hashlib.sha256()
        digest.update(self.hashes.astype("<u8").tobytes())
        digest.update(self.idf.astype("<f4").tobytes())
        digest.update(repr(self.idf_max).encode())
        return digest.hexdigest()

    def lookup(self, features: np.ndarray) -> np.ndarray:
        """IDF of each feature hash: ``(F,)`` uint64 -> ``(F,)`` float64."""
        if self.hashes.size == 0:
            return np.full(features.shape, self.idf_max)
        pos = np.searchsorted(self.hashes, features)  # (F,)
        pos = np.minimum(pos, self.hashes.size - 1)
        hit = self.hashes[pos] == features
        return np.where(hit, self.idf[pos].astype(np.float64), self.idf_max)

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": "worx-idf-1",
                "n_docs": self.n_docs,
                "min_df": self.min_df,
                "idf_max": self.idf_max,
                "char_ngrams": list(self.char_ngrams),
                "max_chars": self.max_chars,
                "shape_ngrams": list(self.shape_ngrams),
                "hashes_u64le_b64": base64.b64encode(self.hashes.astype("<u8").tobytes()).decode(),
                "idf_f32le_b64": base64.b64encode(self.idf.astype("<f4").tobytes()).decode(),
            }
        )

    @classmethod
    def from_json(cls, raw: str | bytes) -> IdfTable:
        body = json.loads(raw)
        if not isinstance(body, dict) or body.get("format") != "worx-idf-1":
            raise ValueError(
                "not a worx IDF table (format 'worx-idf-1'); rebuild it with "
                "`python -m router.idf CORPUS_DIR OUT.json`"
            )
        hashes = np.frombuffer(base64.b64decode(body["hashes_u64le_b64"]), dtype="<u8")
        idf = np.frombuffer(base64.b64decode(body["idf_f32le_b64"]), dtype="<f4")
        if hashes.shape != idf.shape or (hashes.size > 1 and not np.all(hashes[1:] > hashes[:-1])):
            raise ValueError("corrupt IDF table: arrays differ in length or hashes are unsorted")
        return cls(
            hashes=hashes.astype(np.uint64),
            idf=idf.astype(np.float32),
            idf_max=float(body["idf_max"]),
            n_docs=int(body["n_docs"]),
            min_df=float(body["min_df"]),
            char_ngrams=tuple(int(n) for n in body["char_ngrams"]),
            max_chars=int(body["max_chars"]),
            shape_ngrams=tuple(int(n) for n in body.get("shape_ngrams", ())),
        )


@functools.cache
def load_default_table() -> IdfTable:
    """The bundled table (read once per process)."""
    if not DEFAULT_TABLE.exists():
        raise FileNotFoundError(
            f"{DEFAULT_TABLE} is missing; rebuild it: "
            f"python -m router.idf data/corpus {DEFAULT_TABLE}"
        )
    return IdfTable.from_json(DEFAULT_TABLE.read_text())


def fit_idf(
    texts: Iterable[str],
    char_ngrams: tuple[int, ...] = (3, 4, 5),
    max_chars: int = 4000,
    min_df: float = 0.01,
    shape_ngrams: tuple[int, ...] = SHAPE_NGRAMS,
) -> IdfTable:
    """Document frequencies of every feature over ``texts``; keep those with df >= min_df.

    Content features (words, byte n-grams) and form features (n-grams of orders
    ``shape_ngrams`` of :func:`router.features.shape_text`) are counted alike; their
    hashes never collide (salted).
    """
    counts: dict[int, int] = {}
    n_docs = 0
    for text in texts:
        n_docs += 1
        blocks = feature_blocks(normalise_text(text, max_chars), char_ngrams)
        blocks.append(shape_hashes(text, max_chars, shape_ngrams))
        feats = np.unique(np.concatenate(blocks))
        for h in feats.tolist():
            counts[h] = counts.get(h, 0) + 1
    if n_docs == 0:
        raise ValueError("fit_idf needs at least one text")
    floor = max(1, math.ceil(min_df * n_docs))
    kept = sorted(h for h, c in counts.items() if c >= floor)
    hashes = np.asarray(kept, dtype=np.uint64)
    df = np.asarray([counts[h] for h in kept], dtype=np.float64)
    idf = np.log((1.0 + n_docs) / (1.0 + df)).astype(np.float32)
    return IdfTable(
        hashes=hashes,
        idf=idf,
        idf_max=float(math.log((1.0 + n_docs) / (1.0 + floor))),
        n_docs=n_docs,
        min_df=min_df,
        char_ngrams=tuple(char_ngrams),
        max_chars=max_chars,
        shape_ngrams=tuple(shape_ngrams),
    )


def _corpus_texts(directory: Path) -> Iterable[str]:
    from worx.bundled import read_lines

    return (line.text for line in read_lines(directory))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m router.idf",
        description="Fit the fixed IDF table of the default embedder from a directory of "
        "JSON-lines files (*.jsonl or *.jsonl.gz, one {'text': ...} object per line).",
    )
    parser.add_argument("corpus", type=Path, help="directory of *.jsonl[.gz] files")
    parser.add_argument("out", type=Path, help="JSON file to write")
    parser.add_argument("--min-df", type=float, default=0.01, help="keep features with df >= this")
    args = parser.parse_args(argv)
    table = fit_idf(_corpus_texts(args.corpus), min_df=args.min_df)
    from worx.atomic import atomic_write_bytes

    atomic_write_bytes(args.out, table.to_json().encode())
    print(
        f"{args.out}: {table.hashes.size} features from {table.n_docs} docs, "
        f"idf_max {table.idf_max:.3f}, sha256 {table.sha256[:12]}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
