"""DEMix start candidates: the experts of the domains nearest the job's, not the newest."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from experts.expert import Expert, ExpertConfig
from tests.trainer.test_worker import _worker
from trainer.starts import nearest_starts


def _stored(expert_id: str, domain_id: str, centroid, created_ms: int) -> SimpleNamespace:
    return SimpleNamespace(
        expert_id=expert_id, domain_id=domain_id, centroid=list(centroid), created_ms=created_ms
    )


def _unit(rng: np.random.Generator, dim: int = 16) -> np.ndarray:
    v = rng.standard_normal(dim)
    return v / np.linalg.norm(v)


def test_the_nearest_domains_come_first_one_expert_each_and_the_newest_of_it() -> None:
    rng = np.random.default_rng(0)
    centres = [_unit(rng) for _ in range(6)]
    stored = [_stored(f"e{k}", f"d{k}", c, created_ms=k) for k, c in enumerate(centres)]
    stored.append(_stored("e0-v2", "d0", centres[0], created_ms=10))  # d0 drifted: a new version
    target = centres[0] + 0.5 * centres[3]
    cosines = {f"d{k}": float(c @ target) / np.linalg.norm(target) for k, c in enumerate(centres)}
    expected_domains = sorted(cosines, key=cosines.get, reverse=True)[:3]

    chosen = nearest_starts(stored, target, limit=3)

    assert [m.domain_id for m in chosen] == expected_domains
    assert chosen[0].expert_id == "e0-v2"  # the domain's newest version, once
    assert sum(m.domain_id == "d0" for m in chosen) == 1
    assert nearest_starts(stored, target, limit=0) == []


def test_centroids_of_another_space_come_last_newest_first_and_ties_go_to_the_newer() -> None:
    same = [1.0, 0.0, 0.0]
    stored = [
        _stored("old", "a", same, created_ms=1),
        _stored("new", "b", same, created_ms=2),
        _stored("other-space-old", "c", [1.0, 0.0], created_ms=3),
        _stored("other-space-new", "d", [0.0, 1.0], created_ms=4),
    ]
    chosen = nearest_starts(stored, [1.0, 0.0, 0.0], limit=4)
    assert [m.expert_id for m in chosen] == ["new", "old", "other-space-new", "other-space-old"]


def test_the_worker_offers_an_old_neighbours_expert_over_newer_strangers(
    kafka_conf, topics, trunk, tmp_path
) -> None:
    worker, store = _worker(kafka_conf, topics, trunk, tmp_path, start_candidates=2)
    rng = np.random.default_rng(1)
    neighbour = _unit(rng)
    config = ExpertConfig(kind="adapter", layers=(1,), rank=4)
    store.put("near-old", Expert(config, trunk.hidden_size), "near", list(neighbour))
    for k in range(4):  # registered after it, far from the new domain
        store.put(f"far-{k}", Expert(config, trunk.hidden_size), f"far{k}", list(-neighbour))
    new_domain = neighbour + 0.3 * _unit(rng)

    offered = worker.jobs._candidates(list(new_domain / np.linalg.norm(new_domain)))

    assert "near-old" in offered and len(offered) == 2
