"""Hashed text features shared by the embedder and the IDF fitter (process-independent).

Hashes are computed with crc32 (words) and a vectorised rolling polynomial hash (byte
n-grams), both finished with murmur3's fmix64; never Python's ``hash()``, whose value
changes with ``PYTHONHASHSEED``.
"""

from __future__ import annotations

import re
import unicodedata
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
_UPPER = np.uint32(ord("A"))
_NOT_LETTER, _LATIN, _OTHER_LETTER = 0, 1, 2  # kinds of a non-ASCII character


# A text keeps its diacritic letters in its form only when at least this share of its
# letters have one: below it they are names and loanwords (an English licence quoting
# "Société"), not the text's own writing. Spanish, Portuguese, Swedish or Czech prose has
# 1-15 % (a page that is mostly untranslated English less).
DIACRITIC_SHARE = 0.005


def wide_letter_classes(codes: np.ndarray, firsts: np.ndarray | None = None) -> np.ndarray:
    """The form's classes of the non-ASCII letters in ``codes`` ``(L,)`` uint32, ASCII
    letters already ``"a"``/``"A"``, the texts starting at ``firsts`` ``(B,)`` (None: one
    text); returns a copy when one changes.

    In a text written with diacritics (:data:`DIACRITIC_SHARE`), a Latin letter with one
    stays itself, lower-cased: which diacritics it uses is part of its form (Spanish,
    Portuguese, Catalan, Swedish, Czech and Polish pages of one manual share their layout
    and their untranslated strings; their accents are the form's only difference). Every
    other non-ASCII letter counts as ``"a"``: kept, each Han or Hangul character would
    make the form a copy of the words.
    """
    wide = codes >= 128
    if not wide.any():
        return codes
    distinct, at = np.unique(codes[wide], return_inverse=True)
    kinds = np.asarray([_letter_kind(c) for c in distinct.tolist()], dtype=np.int8)
    lowered = np.asarray([ord(chr(c).lower()[0]) for c in distinct.tolist()], dtype=np.uint32)
    latin = np.zeros(codes.size, dtype=bool)  # (L,) a Latin letter with a diacritic
    latin[wide] = kinds[at] == _LATIN
    letters = (codes == _LOWER) | (codes == _UPPER)  # (L,)
    letters[wide] = kinds[at] != _NOT_LETTER
    firsts = np.zeros(1, dtype=np.int64) if firsts is None else firsts
    text_of = np.repeat(np.arange(firsts.size), np.diff(np.append(firsts, codes.size)))  # (L,)
    latin_count = np.bincount(text_of, weights=latin, minlength=firsts.size)  # (B,)
    letter_count = np.bincount(text_of, weights=letters, minlength=firsts.size)  # (B,)
    uses = latin_count >= DIACRITIC_SHARE * np.maximum(letter_count, 1)  # (B,)
    written = uses[text_of]  # (L,) its text is written with diacritics
    out = codes.copy()
    out[wide] = np.where(kinds[at] == _NOT_LETTER, distinct[at], _LOWER)
    keep = latin & written
    out[keep] = lowered[at[keep[wide]]]
    return out


def _letter_kind(code: int) -> int:
    char = chr(code)
    if not char.isalpha():
        return _NOT_LETTER
    return _LATIN if unicodedata.name(char, "").startswith("LATIN") else _OTHER_LETTER


def shape_codes(text: str, max_chars: int) -> np.ndarray:
    """The form of ``text[:max_chars]`` as code points; returns ``(L,)`` uint32.

    Non-ASCII letters as :func:`wide_letter_classes` says; other non-ASCII characters
    (curly quotes, dashes, symbols) stay themselves.
    """
    classes = text[:max_chars].translate(_ASCII_CLASSES)
    codes = wide_letter_classes(
        np.frombuffer(classes.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    )
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
