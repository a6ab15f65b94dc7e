"""Tokenise documents and pack them into fixed-length micro-batches.

Documents are concatenated, each followed by the end-of-sequence token, and cut into rows of
``seq_len`` tokens: no padding inside training batches, so every token counts. The order of
rows is a seeded permutation per epoch; the position ``(epoch, cursor)`` is all a checkpoint
needs to continue exactly where it stopped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch


def tokenize(tokenizer: Any, texts: Sequence[str]) -> list[list[int]]:
    """Token ids of each text with the trunk's tokenizer (no special tokens added)."""
    if not texts:
        return []
    return [list(ids) for ids in tokenizer(list(texts), add_special_tokens=False)["input_ids"]]


def eos_id(tokenizer: Any) -> int:
    """The tokenizer's end-of-sequence id (pad id as a fallback)."""
    for token_id in (tokenizer.eos_token_id, tokenizer.pad_token_id):
        if token_id is not None:
            return int(token_id)
    raise ValueError("the trunk's tokenizer has neither an eos nor a pad token; add one to it")


def pack(
    token_lists: Sequence[Sequence[int]], seq_len: int, eos: int, *, pad_last: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Concatenate documents (each + eos) and cut into rows of ``seq_len``.

    Returns ``(input_ids, attention_mask)``, both (N, seq_len). With ``pad_last`` the final
    partial row is kept, padded with ``eos`` and masked out; else it is dropped unless it is the
    only row.
    """
    if seq_len < 2:
        raise ValueError("seq_len must be >= 2")
    stream: list[int] = []
    for ids in token_lists:
        stream.extend(ids)
        stream.append(eos)
    full = len(stream) // seq_len
    rows = [stream[i * seq_len : (i + 1) * seq_len] for i in range(full)]
    masks = [[1] * seq_len for _ in range(full)]
    rest = stream[full * seq_len :]
    if len(rest) >= 2 and (pad_last or not rows):
        rows.append(rest + [eos] * (seq_len - len(rest)))
        masks.append([1] * len(rest) + [0] * (seq_len - len(rest)))
    if not rows:
        return torch.zeros(0, seq_len, dtype=torch.long), torch.zeros(0, seq_len, dtype=torch.long)
    return torch.tensor(rows, dtype=torch.long), torch.tensor(
        masks, dtype=torch.long
    )  # (N, T), (N, T)


@dataclass
class BatchStream:
    """Endless micro-batches over packed rows, in a seeded order per epoch.

    ``position()``/``seek()`` save and restore where the stream is.
    """

    input_ids: torch.Tensor  # (N, T)
    attention_mask: torch.Tensor  # (N, T)
    micro_batch_size: int
    seed: int = 0
    epoch: int = 0
    cursor: int = 0  # index into this epoch's permutation

    def __post_init__(self) -> None:
        if len(self.input_ids) == 0:
            raise ValueError("no packed rows to train on")
        self._order = self._permutation(self.epoch)

    def _permutation(self, epoch: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        return torch.randperm(len(self.input_ids), generator=generator)

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next micro-batch ``(input_ids, attention_mask)``, each (B, T)."""
        picked: list[torch.Tensor] = []
        need = self.micro_batch_size
        while need > 0:
            if self.cursor >= len(self._order):
                self.epoch += 1
                self.cursor = 0
                self._order = self._permutation(self.epoch)
            take = self._order[self.cursor : self.cursor + need]
            picked.append(take)
            self.cursor += len(take)
            need -= len(take)
        index = torch.cat(picked)  # (B,)
        return self.input_ids[index], self.attention_mask[index]

    def position(self) -> dict[str, int]:
        return {"epoch": self.epoch, "cursor": self.cursor}

    def seek(self, position: dict[str, int]) -> None:
        self.epoch = int(position["epoch"])
        self.cursor = int(position["cursor"])
        self._order = self._permutation(self.epoch)
