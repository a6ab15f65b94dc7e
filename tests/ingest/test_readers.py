"""File readers: formats, gzip, paragraphs, CSV rows (good, short, not UTF-8), positions."""

from __future__ import annotations

import gzip

import pytest

from ingest.config import IngestConfig
from ingest.files import FileIngestor
from ingest.readers import FileReader, detect_format


def test_detect_format_ignores_gz_and_defaults_to_text(tmp_path):
    assert detect_format("a/b.jsonl.gz") == "jsonl"
    assert detect_format("x.NDJSON") == "jsonl"
    assert detect_format("x.csv.gz") == "csv"
    assert detect_format("x.tsv") == "tsv"
    assert detect_format("notes.md") == "text"


def test_jsonl_gz_skips_blank_lines_and_reports_line_numbers(tmp_path):
    path = tmp_path / "a.jsonl.gz"
    with gzip.open(path, "wb") as handle:
        handle.write(b'{"text": "one"}\r\n\n   \n{"text": "two"}\n')
    reader = FileReader(path)
    items = list(reader)
    assert [(i.line, i.value) for i in items] == [(1, b'{"text": "one"}'), (4, b'{"text": "two"}')]
    assert reader.position == path.stat().st_size


@pytest.mark.parametrize(
    ("unit", "expected"),
    [
        ("paragraph", [(1, b"first para\nstill first"), (4, b"second"), (7, b"third")]),
        ("line", [(1, b"first para"), (2, b"still first"), (4, b"second"), (7, b"third")]),
        ("file", [(1, b"first para\nstill first\n\nsecond\n \n\nthird\n")]),
    ],
)
def test_text_units(tmp_path, unit, expected):
    path = tmp_path / "notes.txt"
    path.write_bytes(b"first para\nstill first\n\nsecond\n \n\nthird\n")
    assert [(i.line, i.value) for i in FileReader(path, text_unit=unit)] == expected


def test_csv_rows_become_objects_and_bad_rows_are_flagged(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_bytes(
        b'\xef\xbb\xbfid,body\r\n1,"multi\nline, quoted"\r\n2\r\n,\r\n3,caf\xe9\r\n4,fine\r\n'
    )
    items = list(FileReader(path))
    assert items[0].obj == {"id": "1", "body": "multi\nline, quoted"} and items[0].line == 2
    assert items[1].error[0] == "bad_csv_row" and items[1].line == 4
    assert items[2].error[0] == "invalid_utf8" and items[2].value == b"3,caf\xe9"
    assert items[3].obj == {"id": "4", "body": "fine"} and items[3].line == 7
    assert len(items) == 4  # the empty row "," is skipped


def test_csv_and_text_files_through_the_ingestor(tmp_path, kafka_conf, topics, drain_topic):
    from ingest.records import DeadLetter, Doc
    from topology.runtimes.publisher import publisher

    csv_path = tmp_path / "t.tsv"
    csv_path.write_text("key\tcontent\tlabel\na\thello  there\tnews\nb\t\tnews\nc\tx\n")
    text_path = tmp_path / "book.txt.gz"
    with gzip.open(text_path, "wb") as handle:
        handle.write(b"Chapter  1\n\nIt was a   dark night.\n\n\xff\xfe broken\n")
    config = IngestConfig(text_field="content", id_field="key", domain_field="label")
    report = FileIngestor(config, publisher(kafka_conf, topics)).run([csv_path, text_path])
    docs = sorted((Doc.from_json(v) for _, v in drain_topic(topics.docs)), key=lambda d: d.text)
    reasons = sorted(DeadLetter.from_json(v).reason for _, v in drain_topic(topics.dlq))
    assert [(d.text, d.label, d.source) for d in docs] == [
        ("Chapter 1", None, "file:book.txt.gz"),
        ("It was a dark night.", None, "file:book.txt.gz"),
        ("hello there", "news", "file:t.tsv"),
    ]
    assert docs[2].doc_id == "a" and docs[0].doc_id.startswith("h")
    assert reasons == ["bad_csv_row", "empty_text", "invalid_utf8"]
    assert report.dead_letters == {"bad_csv_row": 1, "empty_text": 1, "invalid_utf8": 1}


def test_a_truncated_gzip_file_is_a_clear_error(tmp_path, kafka_conf, topics):
    import subprocess
    import sys

    from ingest.files import IngestFileError
    from topology.runtimes.publisher import publisher

    path = tmp_path / "cut.jsonl.gz"
    body = b"".join(b'{"text": "line %d"}\n' % i for i in range(20000))
    path.write_bytes(gzip.compress(body)[:3000])
    ingestor = FileIngestor(IngestConfig(), publisher(kafka_conf, topics))
    with pytest.raises(IngestFileError, match="cannot read .*cut.jsonl.gz after"):
        ingestor.run([path])
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "topology.commands",
            "ingest",
            str(path),
            "--no-progress",
            "--bootstrap-servers",
            kafka_conf["bootstrap.servers"],
        ],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "WORX_KAFKA__TOPIC_PREFIX": topics.prefix},
    )
    assert out.returncode == 1 and "cannot read" in out.stderr
