"""A job's documents as the expert recipe's packed rows: the training rows (documents
tokenised, each followed by the end-of-sequence token, packed into ``seq_len``-token rows
without padding) and the held-out rows it evaluates on (the last one padded, at most
``max_eval_rows``); with no held-out document, the last tenth of the training documents is
held out.

Example
-------
>>> from experts.trunk import load_trunk
>>> from worx.bundled import domain_texts, trunk_dir
>>> tokenizer = load_trunk(trunk_dir()).tokenizer
>>> rows = pack_job(tokenizer, domain_texts("legal", 10), [], seq_len=64, max_eval_rows=8)
>>> rows.counts["train_docs"], rows.counts["heldout_docs"], rows.counts["heldout_from_train"]
(9, 1, True)
>>> tuple(rows.held_ids.shape[1:]), len(rows.held_ids) <= 8
((64,), True)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from trainer.data import eos_id, pack, tokenize
from trainer.recipes.expert_outcome import TrainingFailed


@dataclass(frozen=True)
class JobRows:
    train_ids: torch.Tensor  # (N, T) training rows
    train_mask: torch.Tensor  # (N, T)
    held_ids: torch.Tensor  # (M, T) held-out rows, M <= max_eval_rows
    held_mask: torch.Tensor  # (M, T)
    counts: dict[str, Any]  # documents and rows of each (the recipe's summary reports them)


def pack_job(
    tokenizer: Any,
    train_texts: Sequence[str],
    heldout_texts: Sequence[str],
    seq_len: int,
    max_eval_rows: int,
) -> JobRows:
    """The packed rows of a job's documents (blank documents dropped).

    Raises
    ------
    TrainingFailed
        ``no_usable_docs`` when the training documents hold no tokens, ``no_heldout_docs``
        when nothing is left to evaluate on.
    """
    heldout_from_train = False
    train_texts = [t for t in train_texts if t.strip()]
    heldout_texts = [t for t in heldout_texts if t.strip()]
    if not heldout_texts:
        if len(train_texts) < 2:
            raise TrainingFailed(
                "no_heldout_docs",
                "no held-out documents to evaluate on, and too few "
                "training documents to set some aside",
            )
        cut = max(1, len(train_texts) // 10)
        train_texts, heldout_texts, heldout_from_train = (
            train_texts[:-cut],
            train_texts[-cut:],
            True,
        )
    eos = eos_id(tokenizer)
    train_ids, train_mask = pack(tokenize(tokenizer, train_texts), seq_len, eos, pad_last=False)
    held_ids, held_mask = pack(tokenize(tokenizer, heldout_texts), seq_len, eos, pad_last=True)
    if len(train_ids) == 0:
        raise TrainingFailed("no_usable_docs", "the training documents contain no tokens")
    if len(held_ids) == 0:
        raise TrainingFailed("no_heldout_docs", "the held-out documents contain no tokens")
    held_ids, held_mask = held_ids[:max_eval_rows], held_mask[:max_eval_rows]  # (M, T)
    counts = {
        "train_docs": len(train_texts),
        "heldout_docs": len(heldout_texts),
        "heldout_from_train": heldout_from_train,
        "train_rows": len(train_ids),
        "heldout_rows": len(held_ids),
    }
    return JobRows(train_ids, train_mask, held_ids, held_mask, counts)
