"""Seeded stream scenarios over the bundled corpus and over any labelled directory."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from worx.ids import validate_id
from worx.scenario import CorpusError, Scenario, read_corpus


@pytest.fixture(scope="module")
def bundled() -> Scenario:
    return Scenario.from_directory()


def test_bundled_corpus_has_seven_domains_with_safe_unique_ids(bundled: Scenario) -> None:
    assert len(bundled.names) == 7 and "python_code" in bundled.names
    ids = [d.doc_id for docs in bundled.domains.values() for d in docs]
    assert len(ids) == len(set(ids))
    for doc_id in ids[:200]:
        validate_id(doc_id, kind="doc_id")


def test_phased_is_seeded_and_ordered(bundled: Scenario) -> None:
    order = ["news", "legal", "scripture"]
    stream = list(bundled.phased(order, per_domain=20, seed=3))
    assert [d.domain for d in stream] == [n for n in order for _ in range(20)]
    assert stream == list(bundled.phased(order, per_domain=20, seed=3))
    assert stream != list(bundled.phased(order, per_domain=20, seed=4))


def test_mixture_is_stationary_and_ids_unique_when_repeating(bundled: Scenario) -> None:
    stream = list(bundled.mixture(1200, ["news", "legal"], weights=[1, 1], seed=0))
    assert len({d.doc_id for d in stream}) == len(stream)  # news has 430 docs: repeats renamed
    for doc in stream:
        validate_id(doc.doc_id, kind="doc_id")
    first, second = Counter(d.domain for d in stream[:600]), Counter(d.domain for d in stream[600:])
    for name in ("news", "legal"):
        assert 240 < first[name] < 360 and 240 < second[name] < 360


def test_interleaved_blocks(bundled: Scenario) -> None:
    stream = list(bundled.interleaved(["news", "legal"], block=5, per_domain=10, seed=0))
    assert [d.domain for d in stream] == ["news"] * 5 + ["legal"] * 5 + ["news"] * 5 + ["legal"] * 5


def test_any_directory_and_clear_errors(tmp_path: Path, bundled: Scenario) -> None:
    with gzip.open(tmp_path / "alpha.jsonl.gz", "wt") as f:
        f.write(json.dumps({"id": "a/1", "text": "first alpha"}) + "\n")
    (tmp_path / "beta.jsonl").write_text(
        json.dumps({"id": "b1", "domain": "B", "text": "beta text"}) + "\n\n"
    )
    corpus = read_corpus(tmp_path)
    assert sorted(corpus) == ["B", "alpha"]  # label from the field, else the file name
    assert corpus["alpha"][0].doc_id == "a_1"
    with pytest.raises(CorpusError, match="unknown domain"):
        list(Scenario(corpus).phased(["nope"]))
    (tmp_path / "bad.jsonl").write_text('{"id": "x"}\n')
    with pytest.raises(CorpusError, match="'text'"):
        read_corpus(tmp_path)
    with pytest.raises(CorpusError, match="no \\*.jsonl"):
        read_corpus(tmp_path / "empty-missing")
