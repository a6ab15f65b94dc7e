"""Token pieces and stop strings (experts/decoding.py) with the tiny trunks' real tokenizers."""

from __future__ import annotations

import pytest

from experts.decoding import Continuation, _pieces_of_prefixes, decode, pieces

TEXTS = ["def add(a, b):\n    return a + b", "héllo wörld ✓ 日本語 🙂 end", "  two  spaces\n\n"]


@pytest.mark.parametrize("text", TEXTS)
def test_pieces_join_to_the_decoded_text(trunk, text: str) -> None:
    tokenizer = trunk.tokenizer
    ids = tokenizer(text)["input_ids"]
    got = pieces(tokenizer, ids)
    assert len(got) == len(ids) and "".join(got) == decode(tokenizer, ids)
    assert "\ufffd" not in "".join(got)


@pytest.mark.parametrize("text", TEXTS)
def test_pieces_from_short_windows_are_the_pieces_of_every_prefix(trunk, text: str) -> None:
    tokenizer = trunk.tokenizer
    ids = tokenizer(text * 3)["input_ids"]
    assert pieces(tokenizer, ids) == _pieces_of_prefixes(tokenizer, ids)


@pytest.mark.parametrize("text", TEXTS)
def test_a_continuation_shows_everything_before_the_stop_and_nothing_after(trunk, text) -> None:
    tokenizer = trunk.tokenizer
    ids = tokenizer(text)["input_ids"]
    full = decode(tokenizer, ids)
    stop = full[len(full) // 2 : len(full) // 2 + 3]
    continuation = Continuation(tokenizer, stop=["never here", stop])
    shown = []
    for token in ids:
        shown.append(continuation.add(token))
        assert stop not in "".join(shown)
        if continuation.stopped:
            break
    shown.append(continuation.rest())
    assert continuation.stopped and "".join(shown) == continuation.text == full[: full.find(stop)]


def test_without_a_stop_the_text_is_all_shown_once(trunk) -> None:
    tokenizer = trunk.tokenizer
    ids = tokenizer(TEXTS[1])["input_ids"]
    continuation = Continuation(tokenizer, stop=["🙂 e"])  # the text has "🙂 end": stops
    unstopped = Continuation(tokenizer, stop=["zzz"])
    parts = [unstopped.add(token) for token in ids] + [unstopped.rest()]
    assert "".join(parts) == decode(tokenizer, ids) and not unstopped.stopped
    assert all("\ufffd" not in p for p in parts)  # an unfinished character is held back
    for token in ids:
        continuation.add(token)
    assert continuation.stopped and continuation.text.endswith("日本語 ")


@pytest.mark.parametrize("text", TEXTS)
def test_byte_level_pieces_are_the_pieces_of_every_prefix(trunk, text: str) -> None:
    from experts.decoding import _byte_level_pieces

    tokenizer = trunk.tokenizer
    ids = tokenizer(text * 3)["input_ids"]
    got = _byte_level_pieces(tokenizer, ids)
    assert got is not None, "the tiny trunks' tokenizers are byte-level BPE"
    assert got == _pieces_of_prefixes(tokenizer, ids)
