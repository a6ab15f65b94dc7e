"""Tiny trunk and corpus texts shared by the trainer tests (nothing downloaded)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from experts.trunk import Trunk, build_tiny_trunk, load_trunk

torch.set_num_threads(1)

CORPUS = Path(__file__).resolve().parents[2] / "data" / "corpus"


def corpus_texts(domain: str, count: int, skip: int = 0) -> list[str]:
    """``count`` documents of a bundled corpus domain, after skipping ``skip``."""
    out: list[str] = []
    with gzip.open(CORPUS / f"{domain}.jsonl.gz", "rt", encoding="utf-8") as handle:
        for i, line in enumerate(handle):
            if i < skip:
                continue
            if len(out) >= count:
                break
            out.append(json.loads(line)["text"])
    return out


@pytest.fixture(scope="session")
def trunk_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_trunk(
        tmp_path_factory.mktemp("trainer-trunk"), family="gpt2", layers=3, width=32, vocab_size=320
    )


@pytest.fixture(scope="session")
def trunk(trunk_dir: Path) -> Trunk:
    return load_trunk(trunk_dir)


def tensor_hashes(module: torch.nn.Module) -> dict[str, str]:
    """sha256 of every parameter and buffer of ``module`` (bit-identity checks)."""
    import hashlib

    return {
        name: hashlib.sha256(
            t.detach().contiguous().view(torch.uint8).numpy().tobytes()
        ).hexdigest()
        for name, t in module.state_dict().items()
    }


def produce_docs(
    conf: dict, topic: str, texts: list[str], prefix: str, partition: int = 0
) -> list[dict]:
    """Produce Doc records to one partition; return ``{"doc_id", "offset", "partition"}`` each."""
    from confluent_kafka import Producer

    from ingest.records import Doc

    producer = Producer(conf)
    placed: list[dict] = []

    def delivered(err, msg):
        assert err is None, err
        placed.append(
            {"doc_id": msg.key().decode(), "offset": msg.offset(), "partition": msg.partition()}
        )

    for i, text in enumerate(texts):
        doc = Doc(doc_id=f"{prefix}-{i}", text=text, source="test")
        producer.produce(
            topic, doc.to_json(), key=doc.doc_id, partition=partition, on_delivery=delivered
        )
    assert producer.flush(15) == 0
    return sorted(placed, key=lambda p: p["offset"])


def make_job(topic: str, placed: list[dict], job_id: str, heldout: int = 4, **changes) -> Any:
    """A TrainJob over ``placed`` docs: the last ``heldout`` are held out."""
    from router.records import DocRef, TrainJob

    partition = placed[0]["partition"]
    ref = DocRef(
        topic=topic, partition=partition, start=placed[0]["offset"], end=placed[-1]["offset"] + 1
    )
    body = {
        "job_id": job_id,
        "domain_id": "scripture",
        "reason": "new_domain",
        "refs": [{k: v for k, v in ref.to_dict().items() if k != "schema_version"}],
        "train_doc_ids": [p["doc_id"] for p in placed[:-heldout]],
        "heldout_doc_ids": [p["doc_id"] for p in placed[-heldout:]],
        "centroid": [0.6, 0.8],
    }
    body.update(changes)
    return TrainJob(**body)


def read_records(conf: dict, topic: str, record_type: type, until, timeout_s: float = 60.0) -> list:
    """Read ``topic`` (partition 0) from the start until ``until(records)`` is true.

    Raises AssertionError with what was read if the condition is not met within ``timeout_s``
    (an upper bound only: it returns as soon as the records are there).
    """
    import time
    import uuid

    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {**conf, "group.id": f"reader-{uuid.uuid4().hex}", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    records: list = []
    deadline = time.monotonic() + timeout_s
    try:
        while not until(records):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"condition not met on {topic} within {timeout_s}s; read {records}"
                )
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            records.append(record_type.from_json(msg.value()))
    finally:
        consumer.close()
    return records


def publish(conf: dict, topic: str, key: str, value: bytes) -> None:
    from confluent_kafka import Producer

    producer = Producer(conf)
    producer.produce(topic, value, key=key)
    assert producer.flush(15) == 0
