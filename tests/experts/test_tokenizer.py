"""Byte-level BPE training: saved in HF format, loads offline, round-trips any text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from experts.tokenizer import EOS_TOKEN, train_bpe_tokenizer

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "def add(a, b):\n    return a + b\n",
    "It is a truth universally acknowledged, that a single man in possession of a fortune.",
    "In the beginning God created the heaven and the earth.",
] * 30


def test_saves_hf_files_and_loads_with_autotokenizer(tmp_path: Path) -> None:
    tok = train_bpe_tokenizer(TEXTS, vocab_size=400, out_dir=tmp_path / "tok")
    out = tmp_path / "tok"
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        assert (out / name).is_file(), name
    special = json.loads((out / "special_tokens_map.json").read_text())
    assert special == {"bos_token": EOS_TOKEN, "eos_token": EOS_TOKEN, "pad_token": EOS_TOKEN}

    loaded = AutoTokenizer.from_pretrained(out, local_files_only=True)
    assert loaded.eos_token == loaded.pad_token == loaded.bos_token == EOS_TOKEN
    assert loaded.eos_token_id == tok.eos_token_id == 0
    assert len(loaded) == len(tok)
    sample = "The lazy fox returns a + b."
    assert loaded(sample)["input_ids"] == tok(sample)["input_ids"]


def test_vocab_size_bounds_and_merges_learned(tmp_path: Path) -> None:
    tok = train_bpe_tokenizer(TEXTS, vocab_size=300, out_dir=tmp_path)
    assert 257 < len(tok) <= 300  # bytes + eos + at least one merge, never above the target
    # A frequent word compresses to fewer tokens than its bytes.
    assert len(tok("the")["input_ids"]) < 3


def test_round_trips_unseen_unicode_and_adds_no_specials(tmp_path: Path) -> None:
    tok = train_bpe_tokenizer(TEXTS, vocab_size=350, out_dir=tmp_path)
    text = "Ünïcødé never seen: 日本語 😀\ttabs\n  and  spaces"
    ids = tok(text)["input_ids"]
    assert tok.eos_token_id not in ids
    assert tok.decode(ids) == text


def test_deterministic(tmp_path: Path) -> None:
    a = train_bpe_tokenizer(TEXTS, vocab_size=350, out_dir=tmp_path / "a")
    b = train_bpe_tokenizer(iter(TEXTS), vocab_size=350, out_dir=tmp_path / "b")
    assert a.get_vocab() == b.get_vocab()


def test_rejects_too_small_vocab(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least 257"):
        train_bpe_tokenizer(TEXTS, vocab_size=100, out_dir=tmp_path)


def test_rejects_empty_and_non_string_input(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no non-empty string"):
        train_bpe_tokenizer(["", ""], vocab_size=300, out_dir=tmp_path)
    with pytest.raises(TypeError, match="must be strings"):
        train_bpe_tokenizer([b"bytes"], vocab_size=300, out_dir=tmp_path)  # type: ignore[list-item]
