"""The shape of a company's stream: many kinds of text mixed from the first day.

:func:`company_schedule` says, for each position of a stream of ``n`` documents, which
domain the document comes from. It is a pure function of the domain names, ``n``, the
``seed`` and the :class:`CompanyShape`:

- frequencies are Zipf-like: the domains are ranked in a seeded random order and the
  domain of rank ``r`` (1 = most common) has weight ``1 / r ** zipf``;
- ``present_at_start`` of the domains (seeded choice) are in the stream from its first
  document, so a discover that starts with an empty table already faces a mixture;
- the others join at a position drawn uniformly from ``[0, join_by * n)``;
- ``fading`` of the domains go silent for ``fade_length * n`` documents, starting at a
  position drawn uniformly from ``[fade_from * n, fade_to * n)``, then come back;
- each document picks among the domains present at its position by their weights.

Example
-------
>>> plan = company_schedule(["a", "b", "c", "d"], 200, seed=1)
>>> len(plan), plan == company_schedule(["a", "b", "c", "d"], 200, seed=1)
(200, True)
>>> sorted(set(plan))
['a', 'b', 'c', 'd']
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class CompanyShape:
    zipf: float = 1.0  # weight of the domain of rank r: 1 / r ** zipf
    present_at_start: float = 0.5  # share of the domains in the stream from its start
    join_by: float = 0.5  # the others join before this share of the stream
    fading: float = 0.2  # share of the domains that go silent once and come back
    fade_length: float = 0.15  # how long they stay silent (share of the stream)
    fade_from: float = 0.3  # a silence starts in [fade_from, fade_to) of the stream
    fade_to: float = 0.7

    def check(self) -> None:
        shares = (self.present_at_start, self.join_by, self.fading, self.fade_length)
        if self.zipf < 0 or not all(0.0 <= x <= 1.0 for x in shares):
            raise ValueError("company stream: zipf must be >= 0 and every share in [0, 1]")
        if not 0.0 <= self.fade_from <= self.fade_to <= 1.0:
            raise ValueError("company stream: need 0 <= fade_from <= fade_to <= 1")


@dataclass(frozen=True)
class DomainPlan:
    name: str
    weight: float
    joins: int  # first position it may appear at
    silent: tuple[int, int]  # [start, end) positions where it does not appear ((0, 0): never)

    def present(self, position: int) -> bool:
        return position >= self.joins and not self.silent[0] <= position < self.silent[1]


def domain_plans(
    names: Sequence[str], n: int, seed: int = 0, shape: CompanyShape | None = None
) -> list[DomainPlan]:
    """Each domain's weight, joining position and silent interval (see the module doc)."""
    shape = shape or CompanyShape()
    shape.check()
    rng = random.Random(f"company:{seed}")
    ranked = sorted(names)
    rng.shuffle(ranked)
    at_start = set(rng.sample(ranked, max(1, round(shape.present_at_start * len(ranked)))))
    fading = set(rng.sample(ranked, round(shape.fading * len(ranked))))
    plans = []
    for rank, name in enumerate(ranked, 1):
        joins = 0 if name in at_start else int(rng.random() * shape.join_by * n)
        silent = (0, 0)
        if name in fading:
            start = int((shape.fade_from + rng.random() * (shape.fade_to - shape.fade_from)) * n)
            silent = (start, start + int(shape.fade_length * n))
        plans.append(DomainPlan(name, 1.0 / rank**shape.zipf, joins, silent))
    return plans


def company_schedule(
    names: Sequence[str], n: int, seed: int = 0, shape: CompanyShape | None = None
) -> list[str]:
    """The domain of each of ``n`` positions (see the module doc)."""
    plans = domain_plans(names, n, seed, shape)
    rng = random.Random(f"company-draws:{seed}")
    out = []
    for position in range(n):
        present = [p for p in plans if p.present(position)]
        if not present:  # every domain silent or not yet joined: the most common one speaks
            present = [plans[0]]
        out.append(rng.choices([p.name for p in present], [p.weight for p in present])[0])
    return out
