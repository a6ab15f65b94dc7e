"""The trunk recipe's data: the corpus split train/held-out by id, token streams, batches.

Example
-------
>>> from worx.bundled import corpus_dir
>>> corpus = load_corpus(corpus_dir(), 0.05, max_docs=8)
>>> sorted(corpus.train)[:2], len(corpus.train["news"]), len(corpus.heldout["news"])
(['biomedical', 'fiction_austen'], 8, 2)
>>> is_heldout("news/ca04/0") == is_heldout("news/ca04/0")
True
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from worx.bundled import corpus_files, file_domain, read_lines
from worx.ids import stable_fraction

HOLDOUT_SALT = "worx-trunk-holdout:"


@dataclass
class Corpus:
    """Documents of every domain, split by a stable hash of the document id."""

    train: dict[str, list[str]] = field(default_factory=dict)  # domain -> texts
    heldout: dict[str, list[str]] = field(default_factory=dict)  # domain -> texts


def is_heldout(doc_id: str, fraction: float = 0.05) -> bool:
    """Whether the trunk recipe holds document ``doc_id`` out of training (stable hash)."""
    return stable_fraction(doc_id, salt=HOLDOUT_SALT) < fraction


def load_corpus(corpus_dir: Path, holdout_fraction: float, max_docs: int = 0) -> Corpus:
    """Read every ``<domain>.jsonl[.gz]`` in ``corpus_dir`` and split it train/held-out.

    ``max_docs`` (0: all) keeps that many training and a quarter as many held-out
    documents of each domain.

    Raises
    ------
    FileNotFoundError
        If the folder holds no corpus file.
    ValueError
        If a line is not a JSON object with string ``id`` and ``text``.
    """
    corpus = Corpus()
    for path in corpus_files(corpus_dir):
        corpus.train[file_domain(path)], corpus.heldout[file_domain(path)] = [], []
    for line in read_lines(corpus_dir):
        doc_id = line.body.get("id")
        if not isinstance(doc_id, str):
            raise ValueError(f"{line.path}:{line.number}: id and text must be strings")
        split = corpus.heldout if is_heldout(doc_id, holdout_fraction) else corpus.train
        split[line.domain].append(line.text)
    if max_docs:
        for domain in corpus.train:
            corpus.train[domain] = corpus.train[domain][:max_docs]
            corpus.heldout[domain] = corpus.heldout[domain][: max(1, max_docs // 4)]
    return corpus


def token_stream(tokenizer: Any, texts: list[str]) -> torch.Tensor:
    """Tokenize ``texts`` into one stream, each document followed by ``<|endoftext|>``."""
    eos = tokenizer.eos_token_id
    ids: list[int] = []
    for start in range(0, len(texts), 256):
        for doc in tokenizer(texts[start : start + 256])["input_ids"]:
            ids.extend(doc)
            ids.append(eos)
    return torch.tensor(ids, dtype=torch.long)  # (N,)


@dataclass
class Batches:
    """Random windows of ``context`` tokens from one stream, in a seeded order."""

    stream: torch.Tensor  # (N,) token ids
    context: int
    batch_size: int
    device: torch.device
    generator: torch.Generator

    def __iter__(self) -> Iterator[torch.Tensor]:
        span = self.stream.numel() - self.context
        offsets = torch.arange(self.context)  # (T,)
        pin = self.device.type == "cuda"
        while True:
            starts = torch.randint(0, span + 1, (self.batch_size,), generator=self.generator)
            batch = self.stream[starts[:, None] + offsets[None, :]]  # (B, T)
            if pin:
                batch = batch.pin_memory()
            yield batch.to(self.device, non_blocking=True)
