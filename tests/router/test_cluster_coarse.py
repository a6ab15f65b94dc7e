"""The clusterer's second, coarser resolution: a domain of many small unrelated sources."""

from __future__ import annotations

import numpy as np

from router.cluster import NoveltyClusterer

DIM = 256


def _buffer(coarse_knn: int, per_site: int, seed: int = 0, tight: int = 0) -> NoveltyClusterer:
    """12 "sites" of one domain (each a tight group of ``per_site`` documents around its
    own direction, all sharing the domain's direction), 60 unrelated documents, and
    ``tight`` documents of a second domain that is dense everywhere."""
    rng = np.random.default_rng(seed)
    clusterer = NoveltyClusterer(
        dim=DIM, capacity=600, knn=10, shared=0.3, min_size=40, coarse_knn=coarse_knn
    )
    domain = rng.normal(size=DIM)
    domain /= np.linalg.norm(domain)
    position = 0
    for site in range(12):
        own = rng.normal(size=DIM)
        centre = 0.6 * domain + own / np.linalg.norm(own)
        for _ in range(per_site):
            vector = centre + 0.15 * rng.normal(size=DIM) / np.sqrt(DIM)
            clusterer.add(
                (vector / np.linalg.norm(vector)).astype(np.float32), _item(site, position)
            )
            position += 1
    for _ in range(60):
        vector = rng.normal(size=DIM)
        clusterer.add((vector / np.linalg.norm(vector)).astype(np.float32), _item(-1, position))
        position += 1
    dense = rng.normal(size=DIM)
    for _ in range(tight):
        vector = dense / np.linalg.norm(dense) + 0.5 * rng.normal(size=DIM) / np.sqrt(DIM)
        clusterer.add((vector / np.linalg.norm(vector)).astype(np.float32), _item(-2, position))
        position += 1
    return clusterer


def _item(site: int, position: int) -> dict:
    kind = {-1: "other", -2: "dense"}.get(site, "site")
    return {"doc_id": f"{kind}-{position}", "seq": position}


def _ids(clusterer: NoveltyClusterer, members: list[int]) -> set[str]:
    return {clusterer.items[i]["doc_id"] for i in members}


def test_a_domain_of_many_small_sources_has_a_core_only_at_the_coarse_resolution() -> None:
    assert _buffer(coarse_knn=0, per_site=6).run() == []  # no 40 documents dense at k=10
    coarse = _buffer(coarse_knn=20, per_site=6)
    [core] = coarse.run()
    members = _ids(coarse, core.members)
    assert len(members) == 72 and all(m.startswith("site-") for m in members)


def test_cores_of_the_fine_resolution_are_kept_as_they_are() -> None:
    fine = _buffer(coarse_knn=0, per_site=6, tight=45)
    both = _buffer(coarse_knn=20, per_site=6, tight=45)
    [fine_core] = [_ids(fine, c.members) for c in fine.run()]
    both_cores = [_ids(both, c.members) for c in both.run()]
    assert all(m.startswith("dense-") for m in fine_core) and len(fine_core) >= 40
    assert fine_core in both_cores and len(both_cores) == 2
    [sites] = [core for core in both_cores if core != fine_core]
    assert len(sites) == 72 and all(m.startswith("site-") for m in sites)


def test_a_coarse_core_that_chains_groups_is_not_reported() -> None:
    """Unrelated documents link at the coarse resolution too (without this rule these
    buffers give a core of 52-60 of them); such a core is several groups (2-means halves
    far apart) and is dropped, so the coarse graph never chains domains."""
    for seed in range(3):
        clusterer = _buffer(coarse_knn=20, per_site=3, seed=seed)  # sites too small
        assert clusterer.run() == []
