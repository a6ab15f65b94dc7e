"""Losses the monitor already measured, keyed by everything that decides them.

The trunk is frozen, every expert is write-once and scoring is deterministic, so the loss
of a text is a function of the text and of its routing: which experts, with which weights,
and which bytes those experts are (the sha256 their manifest names and the store verifies
on every load). The evaluator keeps each measured loss under that key and scores a text
again only when its key is new: a held-out document that just entered its set, or one
whose routing the registration (or a change of the domain table) changed. Two keys:

* a held-out document: ``(doc_id, sha256(text), routing key)`` -> ``(mean loss, tokens)``
  (:class:`LossCache`, used by :class:`monitor.doc_scores.HeldoutScorer`);
* the head of an unsure text scored by the likelihood step for one candidate's experts:
  ``(blake2b(token ids), routing key)`` -> that row's token losses
  (:class:`CachedMixture`, the mixture the router's likelihood step scores with).

The key rests on the weights being the verified ones; when a weight check finds anything,
the evaluator empties both caches (:meth:`LossCache.clear`) and scores that step afresh.

Example
-------
>>> routing_key({"b": 0.25, "a": 0.75}, {"a": "aa", "b": "bb"})
(('a', 0.75, 'aa'), ('b', 0.25, 'bb'))
>>> cache = LossCache(max_entries=2)
>>> cache.put("k", (2.5, 10))
>>> cache.get("k"), cache.get("other"), (cache.hits, cache.misses)
((2.5, 10), None, (1, 1))
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Hashable, Mapping
from typing import Any

import torch

RoutingKey = tuple[tuple[str, float, str], ...]


def routing_key(routing: Mapping[str, float], shas: Mapping[str, str]) -> RoutingKey:
    """``((expert_id, weight, sha256), ...)`` sorted by id; ``()`` is the trunk alone.

    Raises KeyError for an expert ``shas`` does not know (its loss cannot be keyed)."""
    return tuple(sorted((e, float(w), shas[e]) for e, w in routing.items()))


def _digest(ids: torch.Tensor) -> bytes:
    """16 bytes naming a row of token ids (its dtype, length and values)."""
    data = ids.contiguous().numpy()
    return hashlib.blake2b(data.tobytes(), digest_size=16, person=str(data.dtype).encode()).digest()


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class LossCache:
    """A bounded LRU of measured values with hit and miss counts.

    ``enabled`` False: nothing is kept and every lookup misses (the full re-score). A
    held-out document's entry is ~0.3 KB, a head's ~0.5 KB (64 tokens): the default bound
    is ~100 MB at worst; a run of 50 domains of 64 documents keeps a few thousand.
    """

    def __init__(self, max_entries: int = 200_000, enabled: bool = True) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.max_entries = max_entries
        self.enabled = enabled
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable) -> Any | None:
        value = self._items.get(key) if self.enabled else None
        if value is None:
            self.misses += 1
            return None
        self._items.move_to_end(key)
        self.hits += 1
        return value

    def put(self, key: Hashable, value: Any) -> None:
        if not self.enabled:
            return
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.max_entries:
            self._items.popitem(last=False)

    def clear(self) -> None:
        self._items.clear()

    def __len__(self) -> int:
        return len(self._items)


class CachedMixture:
    """``Mixture.token_losses`` for unpadded batches, each row remembered by its token ids
    and routing key; everything else is the wrapped mixture's (``trunk``, ``experts``).

    The likelihood step (experts/likelihood_routing.py) scores the head of every unsure
    held-out text under the trunk and each candidate domain's experts, at every step; a
    row's losses never change while its key does not, so only rows with a new key run
    (as one smaller batch). A padded batch (``attention_mask`` given) is not cached.
    """

    def __init__(self, mixture: Any, shas: Mapping[str, str], cache: LossCache) -> None:
        self.mixture = mixture
        self.shas = shas  # expert_id -> sha256 of its verified weights (kept up to date)
        self.cache = cache

    @property
    def trunk(self) -> Any:
        return self.mixture.trunk

    @property
    def experts(self) -> Any:
        return self.mixture.experts

    def token_losses(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        weights: list[dict[str, float]] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(B, T-1)`` losses and mask, as :meth:`experts.mixture.Mixture.token_losses`."""
        batch = input_ids.shape[0]
        weights = [{} for _ in range(batch)] if weights is None else weights
        if attention_mask is not None or len(weights) != batch:
            return self.mixture.token_losses(input_ids, attention_mask, weights)
        shas = self.shas
        rows = input_ids.detach().to("cpu")  # (B, T)
        keys = [(_digest(rows[b]), routing_key(weights[b], shas)) for b in range(batch)]
        found: dict[int, torch.Tensor] = {}  # row -> its (T-1,) losses
        for b, key in enumerate(keys):
            value = self.cache.get(key)
            if value is not None:
                found[b] = value
        missing = [b for b in range(batch) if b not in found]
        mask = None
        if missing:
            index = torch.tensor(missing, dtype=torch.long, device=input_ids.device)  # (m,)
            losses, mask = self.mixture.token_losses(
                input_ids.index_select(0, index), None, [weights[b] for b in missing]
            )  # (m, T-1) each; no padding: the mask is all ones
            for i, b in enumerate(missing):
                found[b] = losses[i].detach().clone()
                self.cache.put(keys[b], found[b])
        losses = torch.stack([found[b] for b in range(batch)])  # (B, T-1)
        return losses, torch.ones_like(losses)
