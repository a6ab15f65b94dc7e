"""The default embedder: shape, norm, determinism across processes, config fingerprint."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from router.config import RouterConfig
from router.embed import Embedder, HashedTfidfEmbedder, default_embedder

TEXTS = [
    "def main(argv):\n    return parse(argv)\n",
    "Permission is hereby granted, free of charge, to any person obtaining a copy",
    "It is a truth universally acknowledged, that a single man in possession",
    "",
    "x",
]


def test_shape_dtype_and_unit_norm() -> None:
    emb = default_embedder()
    assert isinstance(emb, Embedder)
    out = emb.embed(TEXTS)
    assert out.shape == (len(TEXTS), RouterConfig().embed_dim)
    assert out.dtype == np.float32
    norms = np.linalg.norm(out, axis=1)
    assert np.allclose(norms[[0, 1, 2, 4]], 1.0, atol=1e-5)
    assert norms[3] == 0.0  # empty text: the only zero row


def test_empty_batch_and_string_argument() -> None:
    emb = default_embedder()
    assert emb.embed([]).shape == (0, emb.dim)
    with pytest.raises(TypeError, match="list of texts"):
        emb.embed("one string")  # type: ignore[arg-type]


def test_config_drives_dim_and_fingerprint() -> None:
    small = default_embedder(RouterConfig(embed_dim=32))
    assert small.embed(TEXTS[:1]).shape == (1, 32)
    assert small.fingerprint != default_embedder().fingerprint
    assert default_embedder().fingerprint == default_embedder(RouterConfig()).fingerprint
    other = default_embedder(RouterConfig(embed_char_ngrams=(3, 4)))
    assert other.fingerprint != default_embedder().fingerprint


def test_similar_texts_are_closer_than_unrelated() -> None:
    emb = default_embedder()
    code_a, code_b, prose = emb.embed(
        [
            "def load(path):\n    with open(path) as f:\n        return json.load(f)\n",
            "def save(path, data):\n    with open(path, 'w') as f:\n        json.dump(data, f)\n",
            "Emma Woodhouse, handsome, clever, and rich, with a comfortable home",
        ]
    )
    assert float(code_a @ code_b) > float(code_a @ prose) + 0.1


@pytest.mark.slow
def test_identical_in_another_process_with_other_hash_seed() -> None:
    """Serve time and stream must agree: no dependence on PYTHONHASHSEED or process state."""
    here = default_embedder().embed(TEXTS)
    script = (
        "import json, sys; from router.embed import default_embedder;"
        "print(json.dumps(default_embedder().embed(json.loads(sys.argv[1])).tolist()))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", script, json.dumps(TEXTS)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout
    there = np.asarray(json.loads(out), dtype=np.float32)
    assert np.array_equal(here, there)


def test_idf_table_round_trip_and_damping() -> None:
    from router.idf import IdfTable, fit_idf

    texts = ["the cat sat on the mat", "the dog ate the bone", "the end"] * 4
    table = fit_idf(texts, min_df=0.5)
    again = IdfTable.from_json(table.to_json())
    assert again.sha256 == table.sha256 and np.array_equal(again.hashes, table.hashes)
    # "the" is in every document: its IDF is the smallest; unseen features get idf_max
    from router.features import feature_blocks

    the = feature_blocks("the", (3,))[0]
    assert float(table.lookup(the)[0]) < table.idf_max
    unseen = feature_blocks("zebra", (3,))[0]
    assert float(table.lookup(unseen)[0]) == table.idf_max
    with pytest.raises(ValueError, match="worx IDF table"):
        IdfTable.from_json('{"format": "other"}')


def test_rejects_bad_parameters() -> None:
    with pytest.raises(ValueError, match="dim"):
        HashedTfidfEmbedder(dim=4)
    with pytest.raises(ValueError):
        RouterConfig(embed_char_ngrams=()).validate()
