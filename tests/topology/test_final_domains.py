"""The demo's ``nmi``: every document of the stream in its nearest domain of the finished
run's table, against its label (topology/loop/final_domains.py and
monitor.run_summary.nearest_domain_nmi). No broker: the table file is written here."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from monitor.run_summary import nearest_domain_nmi
from router.embed import default_embedder
from router.records import DomainRecord
from router.table import DomainTable
from router.table_file import FILE, write_table
from topology.loop.final_domains import final_domains_nmi
from worx.scenario import LabelledDoc

CODE = ["def add(a, b):\n    return a + b", "import os\nprint(os.getcwd())", "class A:\n    pass"]
LAW = ["the licensee shall not sublicense", "the licensor grants a licence", "warranty disclaimed"]


def row(domain_id: str, centroid, embedder: str = "") -> DomainRecord:
    vector = np.asarray(centroid, dtype=np.float64)
    unit = (vector / np.linalg.norm(vector)).tolist()
    return DomainRecord(domain_id, unit, 0.1, 3, 0.5, embedder=embedder)


def test_each_document_goes_to_its_nearest_domain_whatever_the_thresholds() -> None:
    table = DomainTable(dim=2)
    table.apply(dataclasses.replace(row("dom-x", [1, 0]), threshold=0.99))  # none within it
    table.apply(row("dom-y", [0, 1]))
    vectors = np.array([[1.0, 0.1], [0.9, 0.2], [0.1, 1.0], [0.2, 0.9]])
    assert nearest_domain_nmi(["a", "a", "b", "b"], vectors, table) == 1.0
    assert nearest_domain_nmi(["a", "b", "a", "b"], vectors, table) == pytest.approx(0.0)
    assert nearest_domain_nmi(["a", "b"], vectors[:2], DomainTable(dim=2)) == 0.0  # all novel
    assert nearest_domain_nmi([], vectors[:0], table) is None


def docs(label: str, texts: list[str]) -> list[LabelledDoc]:
    return [LabelledDoc(f"{label}-{i}", label, text) for i, text in enumerate(texts)]


def write_run(run: Path, embedder, fingerprint: str | None = None) -> None:
    table = DomainTable(dim=embedder.dim)
    for name, texts in (("dom-code", CODE), ("dom-law", LAW)):
        centroid = embedder.embed(texts).mean(axis=0)
        table.apply(row(name, centroid, fingerprint or embedder.fingerprint))
    run.mkdir()
    write_table(run / FILE, table)


def test_the_stream_scored_against_the_run_s_table_with_the_stages_embedder(tmp_path) -> None:
    embedder = default_embedder()
    write_run(tmp_path / "run", embedder)
    stream = [*docs("python_code", CODE), *docs("legal", LAW)]
    stream.append(LabelledDoc("blank", "legal", "   \n "))  # ingest refuses it: not scored
    no_settings: dict[str, str] = {}  # the stages' environment: every default
    assert final_domains_nmi(tmp_path / "run", stream, no_settings) == 1.0
    swapped = [dataclasses.replace(d, domain="legal") for d in docs("x", CODE)]
    assert final_domains_nmi(tmp_path / "run", swapped + docs("legal", LAW), no_settings) == 0.0


def test_a_table_of_another_embedder_is_not_scored(tmp_path) -> None:
    write_run(tmp_path / "run", default_embedder(), fingerprint="hashed-tfidf-000000000000")
    assert final_domains_nmi(tmp_path / "run", docs("legal", LAW), {}) is None
