"""The checks a consumer calls beyond decode, and what producers write for non-finite
numbers: ids, the embedder's dimension, a job's docs topic, the monitor's store check."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from experts.expert import Expert, ExpertConfig
from experts.records import ExpertRegistration
from experts.store import ExpertStore
from ingest.records import DeadLetter
from monitor.evaluator import check_stored
from monitor.weights import expert_weight_file
from router.records import DocRef, DomainRecord, TrainJob
from tests.support.experts import randomize
from trainer.records import TrainStatus
from worx.ids import UnsafeIdError, validate_id
from worx.records import RecordError

REF = DocRef("p.docs", 0, 0, 4).to_dict()


def _job(**changes) -> TrainJob:
    body = {
        "job_id": "job-1",
        "domain_id": "dom-a",
        "reason": "new_domain",
        "refs": [REF],
        "train_doc_ids": ["d1", "d2"],
        "heldout_doc_ids": ["d3"],
        "centroid": [0.6, 0.8],
        **changes,
    }
    return TrainJob(**body)


@pytest.mark.parametrize(
    "value", ["a\n", "a\r\n", "\na", "..", "../a", "a/../b", "a/b", "a\\b", "", ".", "-a", "a\0"]
)
def test_validate_id_refuses_unsafe_names(value: str) -> None:
    with pytest.raises(UnsafeIdError):
        validate_id(value)


@pytest.mark.parametrize("value", ["a", "dom-1", "exp-0a.b_c", "A" * 128])
def test_validate_id_keeps_safe_names(value: str) -> None:
    assert validate_id(value) == value


def test_a_job_with_a_null_centroid_fails_at_decode() -> None:
    raw = _job().to_json().replace(b"[0.6,0.8]", b"[null]")
    with pytest.raises(RecordError) as info:
        TrainJob.from_json(raw, strict=False)
    assert info.value.reason == "wrong_type"


def test_a_job_may_name_only_the_docs_topic() -> None:
    job = TrainJob.from_json(_job().to_json(), strict=False)
    assert job.check_docs_topic("p.docs") is job
    foreign = _job(refs=[REF, {**REF, "topic": "p.secrets"}])
    with pytest.raises(RecordError) as info:
        TrainJob.from_json(foreign.to_json(), strict=False).check_docs_topic("p.docs")
    assert info.value.reason == "foreign_topic" and "p.secrets" in str(info.value)
    malformed = _job(refs=[{**REF, "start": 5, "end": 2}])
    with pytest.raises(RecordError) as info:
        TrainJob.from_json(malformed.to_json(), strict=False)
    assert info.value.reason == "out_of_range"


def test_the_embedders_dimension_is_checked_where_a_consumer_knows_it() -> None:
    row = DomainRecord("dom-a", [0.6, 0.8], 0.5, 10, 0.8)
    reg = ExpertRegistration("e1", "dom-a", "0" * 64, "f" * 64, [0.6, 0.8])
    for record in (row, reg, _job()):
        assert record.check_dim(2) is record
        with pytest.raises(RecordError) as info:
            record.check_dim(3)
        assert info.value.reason == "wrong_dimension"


def test_the_embedder_and_the_trunk_are_checked_where_a_consumer_knows_them() -> None:
    row = DomainRecord("dom-a", [0.6, 0.8], 0.5, 10, 0.8, embedder="tfidf-1")
    assert row.check_embedder("tfidf-1") is row
    assert DomainRecord("dom-a", [0.6, 0.8], 0.5, 10, 0.8).check_embedder("any")  # unnamed
    with pytest.raises(RecordError) as info:
        row.check_embedder("sentence-2")
    assert info.value.reason == "wrong_embedder"
    reg = ExpertRegistration("e1", "dom-a", "0" * 64, "f" * 64, [0.6, 0.8])
    assert reg.check_trunk("f" * 64) is reg
    with pytest.raises(RecordError) as info:
        reg.check_trunk("e" * 64)
    assert info.value.reason == "wrong_trunk"


def test_a_centroid_that_is_not_unit_length_is_refused() -> None:
    for centroid in ([3.0, 4.0], [0.0, 0.0], [1e-9, 0.0]):
        raw = DomainRecord("dom-a", centroid, 0.5, 10, 0.8).to_json()
        with pytest.raises(RecordError) as info:
            DomainRecord.from_json(raw, strict=False)
        assert info.value.reason == "not_normalised"


def test_a_producer_writes_non_finite_numbers_as_null() -> None:
    status = TrainStatus("job-1", "dom-a", "failed", loss=math.nan, figures={"ppl": math.inf})
    raw = status.to_json()
    assert b"NaN" not in raw and b"Infinity" not in raw
    back = TrainStatus.from_json(raw)
    assert back.loss is None and back.figures == {"ppl": None} and back.state == "failed"
    row = DomainRecord("dom-a", [math.nan, 1.0], 0.5, 10, 0.8)
    with pytest.raises(RecordError):  # a required number written as null: refused
        DomainRecord.from_json(row.to_json())


def test_a_record_built_in_code_is_checked_by_validated() -> None:
    with pytest.raises(RecordError) as info:
        DomainRecord("dom-a", [None, None], 0.5, 10, 0.8).validated()  # type: ignore[list-item]
    assert info.value.reason == "wrong_type"
    with pytest.raises(RecordError) as info:
        DomainRecord("dom-a\n", [0.6, 0.8], 0.5, 10, 0.8).validated()
    assert info.value.reason == "unsafe_id"


@pytest.fixture
def store(tmp_path: Path) -> ExpertStore:
    store = ExpertStore(tmp_path / "store", "f" * 64)
    expert = randomize(
        Expert(ExpertConfig(kind="adapter", layers=(0, 1), rank=4), hidden_size=32), seed=1
    )
    store.put("legal-e1", expert, "legal", [0.6, 0.8])
    return store


def test_the_monitor_refuses_a_registration_the_store_does_not_back(store: ExpertStore) -> None:
    sha = store.manifest("legal-e1").sha256
    check_stored(store, "legal-e1", "legal", sha)  # the real one passes
    check_stored(store, "legal-e1", "legal")  # (no sha256 given: not compared)
    for expert_id, domain, digest, reason in [
        ("fake-e1", "legal", sha, "unknown_expert"),
        ("../store", "legal", sha, "unsafe_id"),
        ("legal-e1\n", "legal", sha, "unsafe_id"),
        ("legal-e1", "news", sha, "domain_mismatch"),
        ("legal-e1", "legal", "1" * 64, "sha256_mismatch"),
    ]:
        with pytest.raises(RecordError) as info:
            check_stored(store, expert_id, domain, digest)
        assert info.value.reason == reason, expert_id


def test_the_weight_file_of_an_unsafe_id_is_never_a_path(tmp_path: Path) -> None:
    assert expert_weight_file(tmp_path, "e1") == tmp_path / "e1" / "weights.safetensors"
    for bad in ("../e1", "/etc", "e1\n", ""):
        with pytest.raises(UnsafeIdError):
            expert_weight_file(tmp_path, bad)


def test_a_lone_surrogate_is_refused_in_text_and_reencoded_elsewhere() -> None:
    from ingest.records import Doc
    from router.records import RoutedDoc

    for cls, raw in (
        (Doc, b'{"doc_id":"a","text":"x\\ud800y","schema_version":1}'),
        (
            RoutedDoc,
            RoutedDoc("a", None, 0.0, "t", 0, 0, "ab").to_json().replace(b"ab", b"\\udfff"),
        ),
    ):
        with pytest.raises(RecordError) as info:
            cls.from_json(raw, strict=False)
        assert info.value.reason == "invalid_unicode"
    doc = Doc.from_json(b'{"doc_id":"a","text":"ok","meta":{"k":"\\udc00"},"schema_version":1}')
    assert Doc.from_json(doc.to_json()) == doc  # written on as a JSON escape, not a crash
    letter = DeadLetter("stage_error", "bad \udc00 text", "", "t")
    assert DeadLetter.from_json(letter.to_json()) == letter
