"""Hashed text features shared by the embedder and the IDF fitter (process-independent).

Hashes are computed with crc32 (words) and a vectorised rolling polynomial hash (byte
n-grams), both finished with murmur3's fmix64; never Python's ``hash()``, whose value
changes with ``PYTHONHASHSEED``.
"""

from __future__ import annotations

import re
import zlib

import numpy as np

_WORD = re.compile(r"\w+", re.UNICODE)
_SPACE = re.compile(r"\s+")
_M1 = np.uint64(0xFF51AFD7ED558CCD)  # murmur3 fmix64 constants
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_POLY = np.uint64(0x100000001B3)  # FNV prime, multiplier of the rolling n-gram hash
_S33 = np.uint64(33)
_WORD_SALT = zlib.crc32(b"word:")


def fmix64(h: np.ndarray) -> np.ndarray:
    """murmur3's 64-bit finaliser, vectorised: spreads every input bit over the output."""
    h = h ^ (h >> _S33)
    h = h * _M1
    h = h ^ (h >> _S33)
    h = h * _M2
    return h ^ (h >> _S33)


def ngram_hashes(data: np.ndarray, n: int) -> np.ndarray:
    """Hash of every byte n-gram of ``data`` (uint64 bytes); returns ``(len - n + 1,)`` uint64."""
    count = data.shape[0] - n + 1
    if count <= 0:
        return np.empty(0, dtype=np.uint64)
    h = np.full(count, np.uint64(n), dtype=np.uint64)  # seeded by n: orders do not collide
    for j in range(n):
        h = h * _POLY + data[j : j + count]  # (count,) wraps mod 2**64
    return fmix64(h)


def normalise_text(text: str, max_chars: int) -> str:
    """Lower-case, collapse whitespace, keep the first ``max_chars`` characters."""
    return _SPACE.sub(" ", text[:max_chars].lower()).strip()


def feature_blocks(text: str, char_ngrams: tuple[int, ...]) -> list[np.ndarray]:
    """Feature hashes of a normalised text: ``[words, n-grams of each order in char_ngrams]``.

    Each block is a uint64 array with one entry per occurrence (repeats are the term
    frequencies). The hash values are the keys of the IDF table.
    """
    words = _WORD.findall(text)
    word_h = np.fromiter(
        (zlib.crc32(w.encode(), _WORD_SALT) for w in words), dtype=np.uint64, count=len(words)
    )
    blocks = [fmix64(word_h)]
    data = np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.uint64)  # (bytes,)
    blocks.extend(ngram_hashes(data, n) for n in char_ngrams)
    return blocks
