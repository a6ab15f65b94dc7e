"""Mistakes a user can fix: one line saying what is wrong and how to fix it.

Any layer may raise :class:`UserError` (it is in ``worx``, which every layer may import);
the ``worx`` command prints it as ``worx: <what is wrong>; <how to fix it>`` on stderr and
exits 2, without a traceback (``--debug`` or ``WORX_DEBUG=1`` shows one).

Examples
--------
>>> str(UserError("trunk directory /nope does not exist", "pass --trunk DIR"))
'trunk directory /nope does not exist; pass --trunk DIR'
>>> nearest("legl", ["legal", "news", "scripture"])
'legal'
>>> did_you_mean("legl", ["legal", "news"])
" (did you mean 'legal'?)"
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class UserError(Exception):
    """What is wrong (``message``) and how to fix it (``hint``, may be empty)."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}; {self.hint}" if self.hint else self.message

    def one_line(self) -> str:
        """The message and hint with every run of whitespace (newlines too) made one space."""
        return " ".join(str(self).split())


def nearest(word: str, choices: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The choice most like ``word`` (case-insensitive), or None if none is close."""
    by_lower = {c.lower(): c for c in choices}
    found = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=cutoff)
    return by_lower[found[0]] if found else None


def did_you_mean(word: str, choices: Iterable[str], cutoff: float = 0.6) -> str:
    """``" (did you mean 'X'?)"`` for the nearest choice, or ``""``."""
    match = nearest(word, choices, cutoff)
    return f" (did you mean {match!r}?)" if match else ""
