"""Tiny trunks for tests and benches: random weights, a freshly trained tokenizer.

:func:`build_tiny_trunk` writes a small Hugging Face causal LM (GPT-2 or Llama layout) and
a byte-level BPE tokenizer trained on :func:`corpus_sample` of the bundled corpus, so tests
and benches never download anything. Not used by the pipeline itself.

Example
-------
>>> import tempfile
>>> from experts.trunk import load_trunk
>>> with tempfile.TemporaryDirectory() as d:
...     trunk = load_trunk(build_tiny_trunk(d, family="llama", layers=2, width=32))
...     trunk.num_layers, trunk.hidden_size
(2, 32)
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

import torch

from worx.bundled import corpus_files, domain_texts, file_domain

log = logging.getLogger(__name__)

_FAMILIES = ("gpt2", "llama")  # the layouts experts.trunk.load_trunk knows


def corpus_sample(per_domain: int = 40) -> list[str]:
    """The first ``per_domain`` documents of every bundled corpus domain, domains in name
    order (to train a tiny trunk's tokenizer)."""
    domains = [file_domain(path) for path in corpus_files()]
    return [text for domain in domains for text in domain_texts(domain, per_domain)]


def build_tiny_trunk(
    out_dir: str | Path,
    family: str = "gpt2",
    layers: int = 2,
    width: int = 32,
    vocab_size: int = 512,
    seed: int = 0,
    texts: Iterable[str] | None = None,
    heads: int = 2,
    max_positions: int = 512,
) -> Path:
    """Write a randomly initialised HF causal LM (safetensors) and a BPE tokenizer to ``out_dir``.

    Parameters
    ----------
    family : {"gpt2", "llama"}
        Architecture.
    layers, width, heads : int
        Blocks, hidden size, attention heads (``width`` divisible by ``heads``).
    vocab_size : int
        Target vocabulary of the tokenizer; the model's vocabulary is the tokenizer's.
    seed : int
        Seed of the weight initialisation (same seed, same weights, same fingerprint).
    texts : iterable of str, optional
        Tokenizer training text; default: a sample of the bundled corpus.

    Returns
    -------
    Path
        ``out_dir``, loadable with :func:`experts.trunk.load_trunk`.
    """
    from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig

    from experts.tokenizer import train_bpe_tokenizer

    if family not in _FAMILIES:
        raise ValueError(f"family {family!r} is not supported; choose one of {_FAMILIES}")
    if width % heads:
        raise ValueError(f"width {width} must be divisible by heads {heads}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_bpe_tokenizer(corpus_sample() if texts is None else texts, vocab_size, out)
    vocab = len(tokenizer)
    eos = tokenizer.eos_token_id
    if family == "gpt2":
        config = GPT2Config(
            vocab_size=vocab,
            n_positions=max_positions,
            n_embd=width,
            n_layer=layers,
            n_head=heads,
            bos_token_id=eos,
            eos_token_id=eos,
            pad_token_id=eos,
        )
    else:
        config = LlamaConfig(
            vocab_size=vocab,
            hidden_size=width,
            intermediate_size=width * 4 // 3 * 2,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=heads,
            max_position_embeddings=max_positions,
            bos_token_id=eos,
            eos_token_id=eos,
            pad_token_id=eos,
            tie_word_embeddings=False,
        )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(str(out), safe_serialization=True)
    log.info(
        "built tiny %s trunk (%d layers, width %d, vocab %d) in %s",
        family,
        layers,
        width,
        vocab,
        out,
    )
    return out
