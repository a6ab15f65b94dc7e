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
_SHAPE_SALT = np.uint64(0x5348415045000000)  # "SHAPE": shape n-grams never share a content key


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


# Form of a text ("shape"): every ASCII letter becomes "a" or "A", every digit "0", runs
# of one letter class, of digits or of spaces collapse to one symbol, everything else
# stays. Texts laid out alike (code, tables, "term: definition" lists, dialogue) then share
# features whatever their words. Case and leading whitespace survive (the content
# features drop both): "    def f(x):" -> " a a(a):", "Hello World" -> "Aa Aa".
_ASCII_CLASSES = str.maketrans(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789\t\r\f\v",
    "A" * 26 + "a" * 26 + "0" * 10 + "    ",
)
SHAPE_NGRAMS = (2, 3, 4, 5)  # n-gram orders of the form features (embedder and IDF fitter)
_RUN_SYMBOLS = np.array([ord("a"), ord("A"), ord("0"), ord(" ")], dtype=np.uint32)
_LOWER = np.uint32(ord("a"))


def shape_codes(text: str, max_chars: int) -> np.ndarray:
    """The form of ``text[:max_chars]`` as code points; returns ``(L,)`` uint32.

    A non-ASCII letter counts as ``"a"``; other non-ASCII characters (curly quotes,
    dashes, symbols) stay themselves.
    """
    classes = text[:max_chars].translate(_ASCII_CLASSES)
    codes = np.frombuffer(classes.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    wide = codes >= 128
    if wide.any():
        codes = codes.copy()
        letters = [c for c in np.unique(codes[wide]).tolist() if chr(c).isalpha()]
        codes[np.isin(codes, letters)] = _LOWER
    if codes.size < 2:
        return codes
    keep = np.ones(codes.size, dtype=bool)  # (L,)
    keep[1:] = (codes[1:] != codes[:-1]) | ~np.isin(codes[1:], _RUN_SYMBOLS)
    return codes[keep]


def shape_text(text: str, max_chars: int) -> str:
    """:func:`shape_codes` as a string (for reading; hashing uses the codes)."""
    return shape_codes(text, max_chars).tobytes().decode("utf-32-le")


def shape_hashes(text: str, max_chars: int, ngrams: tuple[int, ...]) -> np.ndarray:
    """Hashes of the n-grams of orders ``ngrams`` of :func:`shape_codes`, one array."""
    codes = shape_codes(text, max_chars).astype(np.uint64)  # (L,)
    blocks = [ngram_hashes(codes, n) for n in ngrams]
    return fmix64(np.concatenate(blocks) ^ _SHAPE_SALT) if blocks else np.empty(0, np.uint64)


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
