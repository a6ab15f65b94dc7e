"""Discover's promotion policy: when a core of novel documents becomes a new domain.

A core found by :class:`router.cluster.NoveltyClusterer` is promoted when it is large
(``promote_min_size``), stable over clustering runs (``promote_stable_runs``), cohesive
(``promote_min_cohesion``), came as a burst (``promote_min_rate``: the share of the stream
its documents made up while they arrived) and is not too wide (its learned routing
threshold at least ``promote_min_threshold``). A core close to a known domain is not new:
:meth:`Promotion.belongs` says when it is part of that domain instead. The domain row of a
promoted core (centroid, thresholds, distance statistics) is :meth:`Promotion.domain_row`.

Every rule is a pure function of the core and the ``[router]`` settings; the discover stage
(:mod:`router.discover`) owns the state and calls these.

Example
-------
>>> import numpy as np
>>> from router.config import RouterConfig
>>> policy = Promotion(RouterConfig(threshold_quantile=0.02, threshold_std=0.0,
...                                 threshold_margin=0.0))
>>> round(policy.threshold(np.array([0.8, 0.9, 1.0], np.float32)), 3)  # the 2% quantile
0.804
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable

import numpy as np

from router.cluster import Candidate
from router.config import RouterConfig
from router.records import DomainRecord, DriftEvent
from router.timeline import Key, Timeline, window
from worx.ids import content_hash

log = logging.getLogger(__name__)


def arrival_rate(keys: list[Key], timeline: Timeline) -> float:
    """Share of the stream that documents entered at ``keys`` made up while they arrived
    (between the 10th and 90th percentile of their entry keys)."""
    low, high = window(keys, 0.1, 0.9)
    inside = sum(1 for k in keys if low <= k <= high)
    return inside / max(1, timeline.between(low, high))


class Promotion:
    """The promotion rules of one ``[router]`` configuration."""

    def __init__(self, config: RouterConfig) -> None:
        self.config = config

    def threshold(self, sims: np.ndarray) -> float:
        """The routing threshold learned from a core's member cosines ``sims`` ``(m,)``."""
        sims = sims.astype(np.float64)
        return (
            min(
                float(np.quantile(sims, self.config.threshold_quantile)),
                float(sims.mean() - self.config.threshold_std * sims.std()),
            )
            - self.config.threshold_margin
        )

    def promotable(
        self,
        cand: Candidate,
        rate: Callable[[Candidate], float],
        claims: Callable[[Candidate, float], int],
    ) -> bool:
        """Does ``cand`` pass every rule? ``rate(cand)`` (its arrival rate) and
        ``claims(cand, threshold)`` (buffered documents outside the core that its learned
        threshold would take) are asked only of a core large, stable and cohesive enough."""
        config = self.config
        if len(cand.members) < config.promote_min_size:
            return False
        if cand.stable < config.promote_stable_runs:
            return False
        if cand.cohesion < config.promote_min_cohesion:
            return False
        if config.promote_min_rate > 0 and rate(cand) < config.promote_min_rate:
            return False  # leftovers gathered over a long time, not a new burst
        threshold = self.threshold(cand.sims)
        if threshold < config.promote_min_threshold:
            return False  # too wide: several domains chained together; wait for more data
        ratio = config.promote_max_claim_ratio
        # too wide, measured: its threshold would take more of the buffer than the core
        # itself holds (a chain of neighbours' first documents, whose own cores would fall
        # inside it); wait until the groups stand apart
        if ratio <= 0 or 0 < config.promote_claim_patience <= cand.stable:
            return True
        if self.burst(cand, rate):
            return True  # its claims are its own kind's loose documents
        return claims(cand, threshold) <= ratio * len(cand.members)

    def burst(self, cand: Candidate, rate: Callable[[Candidate], float]) -> bool:
        """Did the core's documents arrive as a burst (``promote_burst_rate``)? A kind that
        arrives alone makes up most of the stream while it arrives; on a stream that mixes
        dozens of kinds no core comes near that share."""
        return 0 < self.config.promote_burst_rate <= rate(cand)

    def belongs(
        self,
        row: DomainRecord,
        centroid_sim: float,
        cand: Candidate,
        member_sims: np.ndarray,
        rate: Callable[[Candidate], float],
    ) -> bool:
        """Is the core part of the known domain ``row`` rather than a new domain?

        Yes when its centroid is as close as a sample of the domain's own would be
        (``merge_similarity``), when it does not stand apart from the domain by more than
        its own members spread (``belong_separation``: centroid cosine to the domain >=
        that share of the core's cohesion; a loose chain of known domains' tails), or when
        most of its members (cosines ``member_sims`` ``(m,)`` to the domain's centroid)
        would pass the domain's own threshold (a mode of the domain's tail, not something
        new), unless the core came as a burst (``rate(cand)``, see :meth:`burst`): a
        known domain's tail arrives at a share of its domain's.
        """
        config = self.config
        if centroid_sim >= config.merge_similarity:
            return True
        separation = config.belong_separation
        if separation > 0 and centroid_sim >= separation * cand.cohesion:
            return True
        if centroid_sim < cand.cohesion:
            return False  # farther from the domain than its own members are from its centre
        if self.burst(cand, rate):
            return False
        bar = row.threshold + config.belong_level * (row.core_threshold - row.threshold)
        return float(np.median(member_sims)) >= bar

    def domain_row(
        self, cand: Candidate, members: list[dict], embedder: str, now: int
    ) -> DomainRecord:
        """The first version of the domain that core ``cand`` (buffer items ``members``)
        becomes; its id is a hash of the member document ids."""
        ids = sorted(d["doc_id"] for d in members)
        distances = 1.0 - cand.sims.astype(np.float64)  # (m,)
        sims = cand.sims.astype(np.float64)  # (m,)
        threshold = self.threshold(sims)
        core_threshold = float(sims.mean() - self.config.uncertain_std * sims.std())
        labels = Counter(d["label"] for d in members if d.get("label"))
        return DomainRecord(
            domain_id="dom-" + content_hash(",".join(ids), length=12),
            centroid=[round(float(x), 7) for x in cand.centroid],
            threshold=round(threshold, 6),
            size=len(members),
            cohesion=round(cand.cohesion, 6),
            embedder=embedder,
            version=1,
            created_ms=now,
            label_hint=labels.most_common(1)[0][0] if labels else None,
            distance_mean=round(float(distances.mean()), 6),
            distance_std=round(float(distances.std()), 6),
            core_threshold=round(max(core_threshold, threshold), 6),
        )

    def event(
        self,
        row: DomainRecord,
        cand: Candidate,
        taken: list[dict],
        claimed: int,
        seen: int,
        now: int,
    ) -> DriftEvent:
        """The ``promotion`` drift event of domain ``row``, made of core ``cand``: ``taken``
        are the buffer items it took (``claimed`` of them beyond the core), ``seen`` the
        decisions discover has processed."""
        stats = {
            "size": float(len(cand.members)),
            "cohesion": cand.cohesion,
            "threshold": self.threshold(cand.sims),
            "claimed": float(claimed),
            "stable_runs": float(cand.stable),
        }
        log.info(
            "promotion %s",
            json.dumps(
                {"domain_id": row.domain_id, "label_hint": row.label_hint, "seen": seen, **stats}
            ),
        )
        return DriftEvent(
            event_id="ev-" + content_hash(f"promotion:{row.domain_id}", length=16),
            detector="promotion",
            kind="new_domain",
            domain_id=row.domain_id,
            statistics=stats,
            window_start_offset=min(d.get("seq", seen) for d in taken) if taken else seen,
            window_end_offset=seen,
            created_ms=now,
        )
