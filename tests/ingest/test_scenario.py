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


def test_company_stream_is_seeded_and_shaped(bundled: Scenario) -> None:
    from worx.company_stream import CompanyShape, domain_plans

    n = 3000
    stream = list(bundled.company(n, seed=4))
    assert [d.doc_id for d in stream] == [d.doc_id for d in bundled.company(n, seed=4)]
    assert [d.doc_id for d in stream] != [d.doc_id for d in bundled.company(n, seed=5)]
    assert len({d.doc_id for d in stream}) == n  # repeats renamed
    plans = {p.name: p for p in domain_plans(bundled.names, n, seed=4)}
    at_start = {name for name, p in plans.items() if p.joins == 0}
    assert len(at_start) == round(CompanyShape().present_at_start * len(plans))
    # a domain never speaks before it joins, nor while it is silent
    for position, doc in enumerate(stream):
        assert plans[doc.domain].present(position), (position, doc.domain)
    # Zipf-like: the most common domain (rank 1) speaks far more than the rarest
    counts = Counter(d.domain for d in stream)
    ranked = sorted(plans.values(), key=lambda p: -p.weight)
    assert counts[ranked[0].name] > 3 * counts[ranked[-1].name]
    assert {d.domain for d in stream[:200]} <= at_start and len(set(counts)) == len(plans)


def test_company_shape_is_checked() -> None:
    from worx.company_stream import CompanyShape, company_schedule

    with pytest.raises(ValueError, match="share"):
        company_schedule(["a"], 10, shape=CompanyShape(fading=2.0))


def test_many_preset_is_the_trunk_domains_and_the_forty(tmp_path: Path) -> None:
    from worx.bundled import corpus_files, corpus_parts, file_domain, trunk_domains

    parts = corpus_parts("many")
    assert [p[0].name for p in parts] == ["corpus", "corpus_many"]
    assert parts[0][1] == trunk_domains() == ["fiction_austen", "news"]
    names = {file_domain(p) for p in corpus_files(parts[1][0])}
    assert len(names) == 40 and not names & set(trunk_domains())
    (tmp_path / "many").mkdir()  # an existing directory wins over a preset of its name
    assert corpus_parts(tmp_path / "many") == [(tmp_path / "many", None)]
