"""A text the stream repeats is buffered once: copies must not make a core of their own."""

from __future__ import annotations

import numpy as np

from router.cluster import NoveltyClusterer

DIM = 128


def _unit(vector: np.ndarray) -> np.ndarray:
    return (vector / np.linalg.norm(vector)).astype(np.float32)


def _domain_of_repeated_texts(with_content: bool) -> NoveltyClusterer:
    """One domain of 60 distinct texts, each sent 10 times, interleaved."""
    rng = np.random.default_rng(0)
    clusterer = NoveltyClusterer(dim=DIM, capacity=600, knn=10, shared=0.3, min_size=40)
    centre = _unit(rng.normal(size=DIM))
    texts = [_unit(centre + 0.6 * rng.normal(size=DIM) / np.sqrt(DIM)) for _ in range(60)]
    for position in range(600):
        text = position % 60
        item = {"doc_id": f"doc-{position}", "seq": position}
        if with_content:
            item["content"] = f"text-{text}"
        clusterer.add(texts[text], item)
    return clusterer


def test_copies_counted_as_documents_fill_each_others_neighbourhoods_and_no_core_forms() -> None:
    clusterer = _domain_of_repeated_texts(with_content=False)
    assert len(clusterer) == 600
    assert clusterer.run() == []  # each copy's nearest neighbours are its own copies


def test_a_repeated_text_is_buffered_once_and_its_domain_forms_one_core() -> None:
    clusterer = _domain_of_repeated_texts(with_content=True)
    assert len(clusterer) == 60
    [core] = clusterer.run()
    assert len(core.members) >= 50


def test_a_text_is_buffered_again_once_its_copy_left_and_the_set_survives_a_snapshot() -> None:
    clusterer = NoveltyClusterer(dim=4)
    vector = _unit(np.ones(4))
    assert clusterer.add(vector, {"doc_id": "a", "seq": 0, "content": "t"})
    assert not clusterer.add(vector, {"doc_id": "b", "seq": 1, "content": "t"})
    restored = NoveltyClusterer(dim=4)
    restored.restore(clusterer.snapshot())
    assert not restored.add(vector, {"doc_id": "c", "seq": 2, "content": "t"})
    assert restored.expire(oldest_seq=1) == 1
    assert restored.add(vector, {"doc_id": "d", "seq": 3, "content": "t"})
