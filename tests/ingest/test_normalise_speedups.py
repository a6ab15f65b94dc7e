"""The C speed-up of text normalisation returns exactly what the pure-Python rules return."""

from __future__ import annotations

import random
import unicodedata

import pytest

from ingest import normalise
from worx.bundled import read_lines

speedups = pytest.importorskip(
    "ingest._normalise_speedups",
    reason="the optional C speed-up was not built (no C compiler at install time)",
)

ASCII_PIECES = [
    "a",
    "b",
    "word",
    " ",
    "  ",
    "\t",
    " \t ",
    "\n",
    "\n\n\n",
    "\r",
    "\r\n",
    "\x00",
    "\x07",
    "\x0b",
    "\x0c",
    "\x1b",
    "\x1f",
    "\x7f",
    "```",
    "~~~",
    "``",
    "x\n  y",
    "\n    ",
    "\n\t",
]
UNICODE_PIECES = ASCII_PIECES + [
    "\u00a0",
    "\u3000",
    "\u2003",
    "\u2000",
    "\u2028",
    "\u2029",
    "\x85",
    "\x9f",
    "\x80",
    "\ufeff",
    "é",
    "e\u0301",
    "\u4e2d",
    "\U0001f600",
    "\u200b",
    "\u1680",
]


def random_texts(pieces: list[str], count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(pieces) for _ in range(rng.randrange(0, 40))) for _ in range(count)]


def corpus_texts() -> list[str]:
    return [line.text for line in read_lines()]


def pure_normalise(text: str) -> str:
    """normalise_text with every step in Python."""
    if text.isascii():
        return normalise.normalise_ascii(text)
    cleaned = normalise.clean_unicode(text)
    if cleaned is None:
        raise normalise.InvalidUnicode(text)
    return normalise.collapse_whitespace(unicodedata.normalize("NFC", cleaned))


def test_ascii_path_matches_python_on_random_text():
    for text in random_texts(ASCII_PIECES, 20_000, seed=1):
        assert speedups.normalise_ascii(text) == normalise.normalise_ascii(text), repr(text)


def test_unicode_steps_match_python_on_random_text():
    texts = random_texts(UNICODE_PIECES, 20_000, seed=2) + ["a\ud800b", "\udfff"]
    for text in texts:
        cleaned = speedups.clean_unicode(text)
        assert cleaned == normalise.clean_unicode(text), repr(text)
        if cleaned is not None:  # (collapse_whitespace expects cleaned text)
            collapsed = speedups.collapse_whitespace(cleaned)
            assert collapsed == normalise.collapse_whitespace(cleaned), repr(cleaned)
    assert speedups.clean_unicode("a\ud800b") is None


def test_whole_normalisation_matches_python_on_the_corpus():
    texts = corpus_texts()
    assert sum(not t.isascii() for t in texts) > 100  # both paths are exercised
    for text in texts:
        assert normalise.normalise_text(text) == pure_normalise(text)


def test_speedups_refuse_what_is_not_a_string_and_pass_on_non_ascii():
    with pytest.raises(TypeError, match="expects a str"):
        speedups.normalise_ascii(b"bytes")
    with pytest.raises(TypeError, match="expects a str"):
        speedups.collapse_whitespace(None)
    assert speedups.normalise_ascii("caf\u00e9") is None
    unchanged = "already clean\n\n  indented  line"
    assert speedups.normalise_ascii(unchanged) is unchanged  # no copy when nothing changes
