"""`worx demo`'s feed (topology/loop/demo_run.py), phased and mixed (company-shaped), on the
bundled corpus: what `worx ingest` is handed, line by line. No broker: the file is the whole
of it."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from topology.commands import main
from topology.loop.demo_run import (
    BAD_LINES,
    NEW_DOMAINS,
    TRUNK_DOMAINS,
    DemoPlan,
    demo_documents,
    stream_lines,
    write_stream,
)
from worx.company_stream import domain_plans
from worx.errors import UserError


def plan(tmp_path: Path, **fields) -> DemoPlan:
    return DemoPlan(run_dir=tmp_path / "run", trunk_dir=tmp_path / "trunk", **fields)


def documents(lines: list[str]) -> list[dict]:
    return [json.loads(line) for line in lines if line not in BAD_LINES]


def test_mixed_feed_is_seeded_has_every_domain_and_the_malformed_lines(tmp_path: Path):
    mixed = plan(tmp_path, stream="mixed")
    lines = stream_lines(mixed)
    assert lines == stream_lines(plan(tmp_path, stream="mixed"))
    assert lines == stream_lines(plan(tmp_path, stream="company"))  # its older name
    assert lines != stream_lines(plan(tmp_path, stream="mixed", seed=1))
    docs = documents(lines)
    selected = {*TRUNK_DOMAINS, *NEW_DOMAINS}
    counts = Counter(doc["domain"] for doc in docs)
    assert set(counts) == selected
    # as long as the phased stream of the same plan, with the same malformed lines at the
    # same places: 7 domains x 320 + a mixture of 300
    phased = stream_lines(plan(tmp_path))
    assert len(docs) == len(documents(phased)) == 7 * 320 + 300
    assert [i for i, x in enumerate(lines) if x in BAD_LINES] == [
        i for i, x in enumerate(phased) if x in BAD_LINES
    ]
    assert [x for x in lines if x in BAD_LINES] == list(BAD_LINES)
    assert len({doc["id"] for doc in docs}) == len(docs)  # repeats renamed
    # company-shaped: the schedule of worx/company_stream.py over exactly these domains
    plans = {p.name: p for p in domain_plans(sorted(selected), len(docs), seed=0)}
    assert all(plans[doc["domain"]].present(i) for i, doc in enumerate(docs))
    assert len({doc["domain"] for doc in docs[:50]}) >= 3  # mixed from the first document
    assert max(counts.values()) > 3 * min(counts.values())  # Zipf-like, not 320 each


def test_phased_feed_is_still_the_phases_then_the_mixture(tmp_path: Path):
    docs = documents(stream_lines(plan(tmp_path)))
    order = [*TRUNK_DOMAINS, *NEW_DOMAINS]
    phases = [doc["domain"] for doc in docs[: 7 * 320]]
    assert phases == [name for name in order for _ in range(320)]
    assert all(doc["id"].endswith(".m") for doc in docs[7 * 320 :])


def test_docs_sets_the_mixed_streams_length_over_the_selected_domains(tmp_path: Path):
    chosen = plan(tmp_path, stream="mixed", docs=900, old_domains=(), new_domains=NEW_DOMAINS)
    lines = stream_lines(chosen)
    docs = documents(lines)
    assert len(docs) == 900 and {doc["domain"] for doc in docs} == set(NEW_DOMAINS)
    assert [x for x in lines if x in BAD_LINES] == list(BAD_LINES[:2])  # at 199 and 599
    # the order the domains are named in does not change the stream
    backwards = tuple(reversed(NEW_DOMAINS))
    reordered = plan(tmp_path, stream="mixed", docs=900, old_domains=(), new_domains=backwards)
    assert stream_lines(reordered) == lines


def test_write_stream_writes_the_lines_it_counts(tmp_path: Path):
    mixed = plan(tmp_path, stream="mixed", docs=250, new_domains=("legal",))
    path, count = write_stream(mixed)
    assert path.read_text().splitlines() == stream_lines(mixed) and count == 251


def test_a_wrong_mixed_stream_is_refused_before_the_run_directory_exists(tmp_path: Path):
    with pytest.raises(UserError, match="unknown domain"):
        write_stream(plan(tmp_path, stream="mixed", new_domains=("legl",)))
    with pytest.raises(UserError, match="--docs N with N >= 1"):
        write_stream(plan(tmp_path, stream="mixed", docs=0))
    with pytest.raises(UserError, match="unknown stream"):
        demo_documents(plan(tmp_path, stream="shuffled"))
    assert not (tmp_path / "run").exists()


def test_docs_without_the_mixed_stream_is_one_line_error(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--docs", "100", "--out", "runs"]) == 2
    err = capsys.readouterr().err
    assert err == "worx: --docs sets the length of a mixed stream; add --stream mixed\n"
    assert not (tmp_path / "runs").exists()
