"""Token ids to text while serving: each token's piece of the text, and stop strings.

A token's *piece* is what it adds to the decoded text, so the pieces of a sequence join
to its decoded text. A byte-level token that ends inside a multi-byte character adds
nothing until the token that completes the character.

:class:`Continuation` follows a continuation as it grows, token by token: the text that
is safe to show (nothing of a stop string, nor of an unfinished character), and whether a
stop string ended it; the text is cut before the stop string.

Examples
--------
>>> class Letters:  # a tokenizer whose token i is the letter chr(97 + i)
...     def decode(self, ids, skip_special_tokens=True):
...         return "".join(chr(97 + i) for i in ids)
>>> pieces(Letters(), [0, 1, 2])
['a', 'b', 'c']
>>> c = Continuation(Letters(), stop=["cd"])
>>> [c.add(i) for i in (0, 1, 2)], c.stopped  # "c" could begin the stop string: held
(['a', 'b', ''], False)
>>> c.add(3), c.stopped, c.text
('', True, 'ab')
"""

from __future__ import annotations

import codecs
import functools
from collections.abc import Sequence
from typing import Any

UNFINISHED = "\ufffd"  # what a tokenizer decodes an incomplete UTF-8 sequence to


def decode(tokenizer: Any, ids: Sequence[int]) -> str:
    """The text of ``ids`` as the server answers it (special tokens left out)."""
    return tokenizer.decode(list(ids), skip_special_tokens=True)


def pieces(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    """Each token's piece of ``decode(ids)`` (they join to it)."""
    ids = list(ids)
    full = decode(tokenizer, ids)
    fast = _byte_level_pieces(tokenizer, ids)
    if fast is not None and "".join(fast) == full:
        return fast
    fast = _pieces_in_windows(tokenizer, ids)
    if "".join(fast) == full:
        return fast
    return _pieces_of_prefixes(tokenizer, ids)  # a tokenizer whose clean-up needs more context


def _byte_level_pieces(tokenizer: Any, ids: list[int]) -> list[str] | None:
    """Pieces of a byte-level BPE tokenizer (GPT-2's: every token a string over one
    printable character per byte) from the tokens' own bytes through one UTF-8 decoder,
    without a decode per token (two per token took ~1 ms of a 250-token text's scoring,
    holding the GIL that the forwards need). None: a token is not bytes of that alphabet."""
    if not hasattr(tokenizer, "convert_ids_to_tokens"):
        return None
    special = set(getattr(tokenizer, "all_special_ids", ()))
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    out: list[str] = []
    held = ""  # decoded since the last piece, held while a character is unfinished
    for token_id, token in zip(ids, tokenizer.convert_ids_to_tokens(ids), strict=True):
        if token_id not in special:  # decode leaves special tokens out
            raw = _token_bytes(token) if isinstance(token, str) else None
            if raw is None:
                return None
            held += decoder.decode(raw)
        if decoder.getstate()[0]:
            out.append("")  # an unfinished character: the token comes with a later one
        else:
            out.append(held)
            held = ""
    if out:
        out[-1] += held + decoder.decode(b"", final=True)
    return out


@functools.lru_cache(maxsize=1 << 16)
def _token_bytes(token: str) -> bytes | None:
    """A byte-level token's bytes; None: a character outside the alphabet."""
    alphabet = _byte_alphabet()
    if any(ch not in alphabet for ch in token):
        return None
    return bytes(alphabet[ch] for ch in token)


@functools.cache
def _byte_alphabet() -> dict[str, int]:
    """GPT-2's byte-level alphabet, character -> byte (transformers' own table, inverted)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return {char: byte for byte, char in bytes_to_unicode().items()}


def _pieces_in_windows(tokenizer: Any, ids: list[int]) -> list[str]:
    """Pieces from short windows: the tokens since the last whole piece, behind one token
    of context (a tokenizer may drop the leading space of a text's first token). Two
    decodes of a few tokens each per token, where decoding every prefix costs O(T**2)."""
    out: list[str] = []
    start = 0  # the first token whose text is not in ``out`` yet
    for i in range(len(ids)):
        context = max(0, start - 1)
        head = decode(tokenizer, ids[context:start])
        text = decode(tokenizer, ids[context : i + 1])
        if (text.endswith(UNFINISHED) and i + 1 < len(ids)) or not text.startswith(head):
            out.append("")  # an unfinished character: it comes with a later token
            continue
        out.append(text[len(head) :])
        start = i + 1
    return out


def _pieces_of_prefixes(tokenizer: Any, ids: list[int]) -> list[str]:
    out: list[str] = []
    done = ""
    for i in range(len(ids)):
        text = decode(tokenizer, ids[: i + 1])
        if (text.endswith(UNFINISHED) and i + 1 < len(ids)) or not text.startswith(done):
            out.append("")  # an unfinished character (or a tokenizer's clean-up): later
            continue
        out.append(text[len(done) :])
        done = text
    if ids:
        full = decode(tokenizer, ids)
        out[-1] += full[len(done) :] if full.startswith(done) else ""
    return out


class Continuation:
    """The text of a continuation growing one token at a time, cut at the first of
    ``stop`` (the stop string itself is never part of the text)."""

    def __init__(self, tokenizer: Any, stop: Sequence[str] = ()) -> None:
        self.tokenizer = tokenizer
        self.stop = [s for s in stop if s]
        self.ids: list[int] = []
        self.text = ""  # the continuation so far (before a stop string, when one ended it)
        self.stopped = False  # a stop string ended it
        self.shown = 0  # characters of ``text`` handed out by add()

    def add(self, token_id: int) -> str:
        """Append one token; the text that became safe to show (may be empty)."""
        self.ids.append(token_id)
        text = decode(self.tokenizer, self.ids)
        found = [i for i in (text.find(s) for s in self.stop) if i >= 0]
        if found:
            self.text, self.stopped = text[: min(found)], True
            return self._show(len(self.text))
        self.text = text
        return self._show(len(text) - self._held(text))

    def rest(self) -> str:
        """The text not shown yet (call when the continuation ended)."""
        return self._show(len(self.text))

    def _held(self, text: str) -> int:
        """Characters at the end of ``text`` that may not be shown yet: an unfinished
        character, or the start of a stop string."""
        finished = text.rstrip(UNFINISHED)
        return (
            len(text)
            - len(finished)
            + max(
                (k for s in self.stop for k in range(1, len(s)) if finished.endswith(s[:k])),
                default=0,
            )
        )

    def _show(self, upto: int) -> str:
        upto = max(upto, self.shown)
        new = self.text[self.shown : upto]
        self.shown = upto
        return new
