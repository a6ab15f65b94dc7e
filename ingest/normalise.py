"""Text normalisation: Unicode NFC, control characters removed, meaningless whitespace collapsed.

The whitespace heuristic (documented in docs/ingest.md) works line by line, so that code
keeps its shape without having to recognise a language:

- line endings become ``\\n`` (``\\r\\n``, ``\\r``, U+2028, U+2029, U+0085);
- a line that starts with a space or a tab is *indented*: its indentation and inner spacing
  carry meaning (code, aligned tables, verse) and are kept; only trailing whitespace goes;
- lines inside a fenced block (a line starting with three backticks or tildes opens and
  closes it) are kept verbatim, except trailing whitespace;
- on any other line, runs of whitespace (tabs, no-break and other Unicode spaces) become
  one ASCII space, and trailing whitespace goes;
- more than one blank line in a row becomes one blank line; blank lines at the start and
  end of the document go.

Single line breaks are kept everywhere: they may be hard-wrapped prose, but they may also
be verse, lists or headings, and a line break costs the model little.
"""

from __future__ import annotations

import re
import unicodedata

try:  # optional C speed-up (built at install where a C compiler exists); the same rules
    from ingest import _normalise_speedups as _speedups
except ImportError:  # pragma: no cover - the pure-Python functions below do the same
    _speedups = None

# C0 and C1 controls and DEL, except tab and newline (carriage returns are converted
# first); U+FEFF (byte order mark / zero-width no-break space) is dropped too.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x84\x86-\x9f\ufeff]")
_CONTROL_BYTES = bytes([*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F])
_LINE_BREAK = re.compile("\r\n|[\r\u2028\u2029\x85]")
_SPACE_RUN = re.compile(r"[^\S\n]+")  # whitespace other than newline
# (written with a literal prefix: "\n{3,}" makes the regex engine 6x slower here)
_BLANK_RUN = re.compile("\n\n\n+")
# runs of 2+ spaces; the literal prefix lets the regex engine scan for them at C speed
_RUN = re.compile("  +")
# the same, but only after a non-space character (not indentation): a fixed-width
# lookbehind after the literal keeps the fast scan
_INNER_RUN = re.compile(r"  (?<=\S  ) *")
_SURROGATE = re.compile("[\ud800-\udfff]")


class InvalidUnicode(ValueError):
    """Text holds lone surrogates (``"\\ud800"`` escapes in JSON): not valid Unicode."""


def normalise_text(text: str) -> str:
    """Return ``text`` in NFC with control characters removed and whitespace collapsed.

    Raises:
        InvalidUnicode: the text contains lone UTF-16 surrogates, which no UTF-8
            encoder accepts (they come from ``\\ud800``-style escapes in JSON).

    Examples:
        >>> normalise_text("Cafe\\u0301  au\\tlait\\x07\\r\\n\\n\\n\\nnext")
        'Café au lait\\n\\nnext'
        >>> normalise_text("def f():\\n    return  1   \\n")
        'def f():\\n    return  1'
    """
    if text.isascii():  # fast path (most documents): no surrogates, already NFC
        if _speedups is not None:
            return _speedups.normalise_ascii(text)
        return normalise_ascii(text)
    cleaned = clean_unicode(text) if _speedups is None else _speedups.clean_unicode(text)
    if cleaned is None:
        raise InvalidUnicode("text contains lone UTF-16 surrogates (invalid Unicode)")
    text = cleaned
    if not unicodedata.is_normalized("NFC", text):
        text = unicodedata.normalize("NFC", text)
    if _speedups is not None:
        return _speedups.collapse_whitespace(text)
    return collapse_whitespace(text)


def clean_unicode(text: str) -> str | None:
    """Line breaks to ``\\n`` and control characters removed; None if ``text`` holds lone
    surrogates (the C speed-up's function of the same name does the same)."""
    if _SURROGATE.search(text):
        return None
    if "\r" in text or "\u2028" in text or "\u2029" in text or "\x85" in text:
        text = _LINE_BREAK.sub("\n", text)
    return _CONTROL.sub("", text)


def normalise_ascii(text: str) -> str:
    """The pure-Python ASCII path of :func:`normalise_text` (``text`` must be ASCII).

    ``ingest/_normalise_speedups.c`` implements the same rules in C (as it does those of
    :func:`collapse_whitespace`); the tests compare the two on random and real text.
    """
    if "\r" in text:
        text = _LINE_BREAK.sub("\n", text)
    raw = text.encode("ascii")
    if len(raw.translate(None, _CONTROL_BYTES)) != len(raw):
        text = _CONTROL.sub("", text)
    return collapse_whitespace(text)


def collapse_whitespace(text: str) -> str:
    """The whitespace rules of the module docstring, for text without control characters
    and with ``\\n`` line breaks only (:func:`clean_unicode` or :func:`normalise_ascii` did
    that)."""
    # (one-character searches first: they run at memchr speed, substring searches do not)
    fenced = ("`" in text and "```" in text) or ("~" in text and "~~~" in text)
    if "\t" not in text and not fenced and text.isascii():
        text = _collapse_spaces(text)
    else:
        text = _collapse_lines(text)
    if "\n\n\n" in text:
        text = _BLANK_RUN.sub("\n\n", text)
    return text.strip("\n")


def _collapse_spaces(text: str) -> str:
    """Fast path (ASCII, no tabs, no fences): the line rules without a line loop."""
    if "  " in text and "\n " not in text and not text.startswith(" "):
        text = _RUN.sub(" ", text)  # no indented line: every run goes, in one C call
    elif "  " in text:
        parts = []
        last = 0
        for match in _INNER_RUN.finditer(text):
            start = match.start()
            line_start = text.rfind("\n", 0, start) + 1
            if text[line_start] in " \t":
                continue  # an indented line keeps its inner spacing
            parts.append(text[last:start])
            parts.append(" ")
            last = match.end()
        if parts:
            parts.append(text[last:])
            text = "".join(parts)
    if " \n" in text or text.endswith(" "):  # trailing spaces (a regex here is 10x slower)
        text = "\n".join([line.rstrip(" ") for line in text.split("\n")])
    return text


def _collapse_lines(text: str) -> str:
    """General path: line by line, tracking fenced blocks and Unicode spaces."""
    lines = text.split("\n")
    in_fence = False
    for i, line in enumerate(lines):
        if line.startswith(("```", "~~~")):
            in_fence = not in_fence
        elif not in_fence and line[:1] not in (" ", "\t"):
            line = _SPACE_RUN.sub(" ", line)
        lines[i] = line.rstrip()
    return "\n".join(lines)


def split_text(text: str, max_chars: int) -> list[str]:
    """Split ``text`` into pieces of at most ``max_chars`` characters.

    Cuts preferably at a blank line, then at a line break, then at a space, and only
    as a last resort inside a word; pieces are stripped of surrounding blank lines.

    Examples:
        >>> split_text("aaa bbb\\n\\nccc", 8)
        ['aaa bbb', 'ccc']
    """
    if max_chars < 1:
        raise ValueError("max_chars must be >= 1")
    pieces: list[str] = []
    rest = text
    while len(rest) > max_chars:
        window = rest[: max_chars + 1]
        cut, skip = max_chars, 0  # last resort: inside a word
        for sep in ("\n\n", "\n", " "):
            found = window.rfind(sep)
            if found > 0:
                cut, skip = found, len(sep)
                break
        piece = rest[:cut].strip("\n")
        if piece.strip():
            pieces.append(piece)
        rest = rest[cut + skip :].lstrip("\n")
    if rest.strip():
        pieces.append(rest.strip("\n"))
    return pieces
