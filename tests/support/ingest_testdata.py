"""Test data and helpers shared by the ingest tests and the Apache Kafka test."""

from __future__ import annotations

import json
import random

# one bad line per dead-letter class a JSON-lines file can hold (strict mode, labels on)
BAD_LINES: list[tuple[str, bytes]] = [
    ("not_json", b'{"id": "b", "text": '),
    ("not_object", b'["a", "list"]'),
    ("missing_text", b'{"id": "b", "domain": "news"}'),
    ("text_not_string", b'{"id": "b", "text": 3.5}'),
    ("empty_text", b'{"id": "b", "text": " \\t\\n "}'),
    ("invalid_utf8", b'{"id": "b", "text": "caf\xe9 \xff"}'),
    ("oversize", b'{"id": "b", "text": "' + b"long " * 400 + b'"}'),
    ("unknown_schema_version", b'{"schema_version": 2, "id": "b", "text": "hello"}'),
    ("unknown_fields", b'{"id": "b", "text": "hello", "colour": "red"}'),
    ("invalid_unicode", b'{"id": "b", "text": "x \\udc00 y"}'),
    ("bad_id", b'{"id": [1], "text": "hello"}'),
    ("bad_label", b'{"id": "b", "text": "hello", "domain": "a/../b"}'),
]
MIXED_CONFIG = {"strict": True, "domain_field": "domain", "max_doc_chars": 1000}


def write_mixed_file(path, good: int = 5000, bad: int = 1000, seed: int = 7):
    """A JSON-lines file of ``good`` valid and ``bad`` invalid lines, shuffled.

    Returns (good ids, {line number: expected dead-letter reason}).
    """
    rng = random.Random(seed)
    lines: list[tuple[str | None, bytes]] = []
    for i in range(good):
        words = " ".join(rng.choice(["alpha", "beta", "gamma", "delta"]) for _ in range(20))
        body = {"id": f"good-{i}", "text": f"doc {i}:  {words}", "domain": f"d{i % 3}"}
        lines.append((None, json.dumps(body).encode()))
    for i in range(bad):
        lines.append(BAD_LINES[i % len(BAD_LINES)])
    rng.shuffle(lines)
    expected = {}
    with open(path, "wb") as handle:
        for number, (reason, raw) in enumerate(lines, start=1):
            handle.write(raw + b"\n")
            if reason is not None:
                expected[number] = reason
    return {f"good-{i}" for i in range(good)}, expected
