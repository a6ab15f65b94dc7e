"""Byte-level BPE tokenizer training (GPT-2 style) with the `tokenizers` library.

The result is saved in Hugging Face format, so ``AutoTokenizer.from_pretrained(out_dir)``
loads it offline like any user's tokenizer. One special token, ``<|endoftext|>``, serves
as end-of-sequence, beginning-of-sequence and padding, as in GPT-2.

Examples
--------
>>> import tempfile
>>> texts = ["the cat sat on the mat", "the dog sat on the log"] * 20
>>> with tempfile.TemporaryDirectory() as d:
...     tok = train_bpe_tokenizer(texts, vocab_size=300, out_dir=d)
...     tok.decode(tok("the cat")["input_ids"])
'the cat'
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from worx.atomic import atomic_write_json

logger = logging.getLogger(__name__)

EOS_TOKEN = "<|endoftext|>"
# 256 byte symbols + the special token: the smallest vocabulary that can encode anything.
MIN_VOCAB_SIZE = 257


def train_bpe_tokenizer(
    texts: Iterable[str],
    vocab_size: int,
    out_dir: str | Path,
    *,
    min_frequency: int = 2,
    show_progress: bool = False,
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer on ``texts`` and save it in Hugging Face format.

    Parameters
    ----------
    texts
        Training text, one string per document; consumed once (a generator is fine).
    vocab_size
        Target vocabulary size including the 256 byte symbols and ``<|endoftext|>``;
        at least 257. The result may be smaller when the text has too few merges.
    out_dir
        Directory to write ``tokenizer.json``, ``tokenizer_config.json`` and
        ``special_tokens_map.json`` into (created if missing).
    min_frequency
        A pair must occur at least this often to be merged.
    show_progress
        Show the `tokenizers` trainer's progress bar.

    Returns
    -------
    PreTrainedTokenizerFast
        The tokenizer, with ``eos_token == bos_token == pad_token == "<|endoftext|>"``.

    Raises
    ------
    ValueError
        If ``vocab_size`` is below 257 or ``texts`` holds no non-empty string.
    """
    if vocab_size < MIN_VOCAB_SIZE:
        raise ValueError(
            f"vocab_size={vocab_size} is too small: a byte-level BPE needs at least "
            f"{MIN_VOCAB_SIZE} (256 bytes + {EOS_TOKEN}); pass a larger vocab_size"
        )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[EOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=show_progress,
    )
    counted = _CountingIterator(texts)
    tokenizer.train_from_iterator(counted, trainer=trainer)
    if counted.non_empty == 0:
        raise ValueError("texts holds no non-empty string: nothing to train a tokenizer on")

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=EOS_TOKEN,
        bos_token=EOS_TOKEN,
        pad_token=EOS_TOKEN,
        model_max_length=1_000_000,
    )
    fast.save_pretrained(str(out))
    _write_portable_config(out)
    logger.info(
        "trained byte-level BPE: %d tokens from %d documents -> %s",
        fast.vocab_size,
        counted.non_empty,
        out,
    )
    return fast


def _write_portable_config(out: Path) -> None:
    """Name the generic fast tokenizer class and write ``special_tokens_map.json``.

    transformers 5 records its internal backend class name, which transformers 4 cannot
    resolve; ``PreTrainedTokenizerFast`` loads in both.
    """
    config_path = out / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config.pop("backend", None)
    atomic_write_json(config_path, config)
    special = {name: EOS_TOKEN for name in ("bos_token", "eos_token", "pad_token")}
    atomic_write_json(out / "special_tokens_map.json", special)


class _CountingIterator:
    """Pass strings through, counting the non-empty ones (to reject empty input)."""

    def __init__(self, texts: Iterable[str]) -> None:
        self._texts = texts
        self.non_empty = 0

    def __iter__(self):
        for text in self._texts:
            if not isinstance(text, str):
                raise TypeError(f"texts must be strings, got {type(text).__name__}")
            if text:
                self.non_empty += 1
                yield text
