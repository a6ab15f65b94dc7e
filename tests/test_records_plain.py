"""The plain decode path of Record.from_json (orjson, flat checks) against the full one.

Every input must come out the same way by both: the same record, or a RecordError of the
same type, reason and message (the plain path hands anything unusual to the full one).
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

import worx.record_decode_plain as plain_path
import worx.records as records
from experts.expert import ExpertConfig
from experts.manifest import Manifest
from ingest.records import Doc
from router.records import DomainRecord, RoutedDoc
from tests.hostile.test_records_decode import GOOD
from worx.record_decode_full import RECORD_TYPES, _is_module_level
from worx.records import RecordError
from worx.scenario import Scenario

DOC = {"doc_id": "d1", "text": "hello world", "schema_version": 1}
ROUTED = RoutedDoc("d1", "dom-a", 0.5, "t.docs", 0, 7, text="x", label="legal").to_dict()
DOMAIN = DomainRecord("dom-a", [0.6, 0.8], 0.3, 10, 0.7).to_dict()


def _doc(**change) -> bytes:
    return json.dumps({**DOC, **change}).encode()


HOSTILE_DOCS = [
    _doc(),
    _doc(label=None, part=3, created_ms=2**63 - 1, source="file:a", meta={"k": "v", "": ""}),
    _doc(text="Die Würde des Menschen — «ist» 😀", meta={}),
    b'{"doc_id":"d1","text":"x","schema_version":1,"text":"second wins"}',
    b'\xef\xbb\xbf{"doc_id":"d1","text":"bom","schema_version":1}',  # json reads a BOM
    '{"doc_id":"d1","text":"as str","schema_version":1}',
    json.dumps(DOC).encode("utf-16"),  # json detects UTF-16; orjson does not
    b'{"doc_id":"d1","text":"x\\ud800","schema_version":1}',  # lone surrogate
    b'{"doc_id":"d1","text":"x\xed\xa0\x80","schema_version":1}',  # an encoded surrogate
    b'{"doc_id":"d1","text":"x","part":NaN,"schema_version":1}',
    b'{"doc_id":"d1","text":"x","part":1e400,"schema_version":1}',
    _doc(part=2**64),
    _doc(part=-(2**63) - 1),
    _doc(part=True),
    _doc(part=1.0),
    _doc(created_ms=-1),
    _doc(label=7),
    _doc(label="not a safe id/.."),
    _doc(text=""),
    _doc(text=" \n\t"),
    _doc(doc_id="a\x00b"),
    _doc(meta={"k": 1}),
    _doc(meta={"k": {"deep": "x"}}),
    _doc(meta=["k"]),
    _doc(schema_version=True),
    _doc(schema_version=2),
    _doc(extra="unknown field"),
    b'{"doc_id":"d1","text":"x","schema_version":1,"extra":' + b"[" * 990 + b"]" * 990 + b"}",
    json.dumps({k: v for k, v in DOC.items() if k != "text"}).encode(),
    json.dumps({**ROUTED, "text": "a RoutedDoc on the docs topic"}).encode(),
    b"[1, 2]",
    b'"just a string"',
    b"{",
    b"",
    b"{}",
]


def _outcome(record_type: type, raw: bytes | str) -> tuple:
    try:
        return ("record", record_type.from_json(raw, strict=False))
    except RecordError as exc:
        return (type(exc).__name__, exc.reason, str(exc))


def _both(record_type: type, raw: bytes | str, monkeypatch: pytest.MonkeyPatch) -> tuple:
    plain = _outcome(record_type, raw)
    with monkeypatch.context() as patch:
        patch.setattr(plain_path, "orjson", None)  # only the full path
        full = _outcome(record_type, raw)
    return plain, full


@pytest.mark.parametrize("raw", HOSTILE_DOCS, ids=range(len(HOSTILE_DOCS)))
def test_a_doc_decodes_alike_by_both_paths(raw, monkeypatch):
    plain, full = _both(Doc, raw, monkeypatch)
    assert plain == full


def test_the_bundled_documents_take_the_plain_path_and_decode_alike(monkeypatch):
    docs = [
        Doc(doc_id=d.doc_id, text=d.text, label=d.domain, created_ms=i)
        for i, d in enumerate(Scenario.from_directory().mixture(300, seed=5))
    ]
    raws = [d.to_json() for d in docs]
    assert all(
        plain_path.plain_decode(Doc, raw) == doc for raw, doc in zip(raws, docs, strict=True)
    )
    for raw in raws[:50]:
        plain, full = _both(Doc, raw, monkeypatch)
        assert plain == full


@pytest.mark.parametrize(
    "record_type, body",
    [
        (RoutedDoc, ROUTED),
        (RoutedDoc, {**ROUTED, "similarity": 2.5}),
        (RoutedDoc, {**ROUTED, "domain_id": None, "uncertain": 1}),
        (DomainRecord, DOMAIN),
        (DomainRecord, {**DOMAIN, "centroid": [0.6, 0.8, 0.0]}),
        (DomainRecord, {**DOMAIN, "centroid": [3.0, 4.0]}),
        (DomainRecord, {**DOMAIN, "centroid": [0.6, "0.8"]}),
        (DomainRecord, {**DOMAIN, "expert_ids": ["e1", 2]}),
    ],
)
def test_other_records_decode_alike_by_both_paths(record_type, body, monkeypatch):
    plain, full = _both(record_type, json.dumps(body).encode(), monkeypatch)
    assert plain == full


def test_routed_doc_json_is_the_full_encoders_value():
    for routed in (
        RoutedDoc("d1", None, 1e-6, "t.docs", 0, 5, text="a\nb\x00\u2028 é", label=None),
        RoutedDoc("d2", "dom-a", float("nan"), "t.docs", 3, 9, uncertain=True),
        RoutedDoc("d3", "dom-a", 0.25, "t.docs", 0, 1, text="lone \ud800 surrogate"),
    ):
        assert json.loads(routed.to_json()) == json.loads(records.Record.to_json(routed))


SAMPLES = {
    **GOOD,
    Manifest: Manifest(
        "exp-1",
        "dom-a",
        [0.6, 0.8],
        "f" * 64,
        ExpertConfig(kind="adapter", layers=(0, 1), rank=4).to_dict(),
        32,
        "0" * 64,
        1000,
        10,
        summary={"loss": 1.0},
    ),
}
# each field of a sample replaced by these (or left out): wrong types, edges of the checks
CHANGES: list[Any] = [None, "x", "", 1, -1, 1.5, 2**64, True, [], ["x"], [1.5], {}, {"k": 1}]


def test_the_samples_cover_every_record_class():
    assert set(SAMPLES) == {t for t in RECORD_TYPES if _is_module_level(t)}


@pytest.mark.parametrize("record_type", list(SAMPLES), ids=lambda t: t.__name__)
def test_every_record_class_decodes_alike_by_both_paths(record_type, monkeypatch):
    body = SAMPLES[record_type].validated().to_dict()
    assert _both(record_type, json.dumps(body).encode(), monkeypatch)[0][0] == "record"
    variants = [{**body, "extra": 1}, {**body, "schema_version": 2}]
    for name in body:
        variants.append({k: v for k, v in body.items() if k != name})
        variants += [{**body, name: value} for value in CHANGES]
    raws = [json.dumps(v).encode() for v in variants]
    raws += [json.dumps({**body, name: math.nan}).encode() for name in body]  # NaN literals
    for raw in raws:
        plain, full = _both(record_type, raw, monkeypatch)
        assert plain == full, raw
