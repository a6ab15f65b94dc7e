"""Configuration of the ingest stage (section ``[ingest]`` of worx.toml)."""

from __future__ import annotations

from dataclasses import dataclass

from worx.settings import setting


@dataclass(frozen=True)
class IngestConfig:
    max_doc_chars: int = setting(
        20_000,
        help='longer texts are dead-lettered, or split with oversize="split"',
        unit="chars",
        range=">= 1",
    )
    oversize: str = setting(
        "dlq", help="what happens to a text longer than max_doc_chars", choices=("dlq", "split")
    )
    dedup_window: int = setting(
        100_000,
        help="how many recent doc ids are remembered to drop duplicates",
        unit="ids",
        range=">= 0",
    )
    strict: bool = setting(
        False, help="dead-letter input objects with fields the mapping does not name"
    )
    text_field: str = setting("text", help="the input field that holds the text", range="non-empty")
    id_field: str = setting(
        "id", help="the input field that holds the id; empty string: always use the content hash"
    )
    domain_field: str = setting(
        "",
        help="the input field that holds a domain label: labelled data only (evaluation); "
        "empty: no label",
    )
    meta_fields: tuple[str, ...] = setting(
        (), help="input fields copied (as strings) into Doc.meta"
    )
    source_topics: tuple[str, ...] = setting((), help="company topics consumed by `worx connect`")
    source_format: str = setting(
        "json", help="how company topic values are read", choices=("json", "text")
    )
    source_bootstrap_servers: str = setting(
        "",
        help="`worx connect` may read from another cluster than the one worx.docs lives on; "
        "empty: the same cluster as [kafka]",
    )
    source_client: dict[str, str] = setting(
        default_factory=dict,
        help="librdkafka settings of that source cluster: the sub-table [ingest.source_client], "
        "or WORX_INGEST_SOURCE_CLIENT__<NAME> (underscores become dots)",
    )
    source_group: str = setting(
        "worx-connect", help="consumer group of the connector on the source"
    )
    batch_size: int = setting(
        500, help="records per produce/flush/offset-store cycle", unit="records", range=">= 1"
    )
    max_message_bytes: int = setting(
        4 * 1024 * 1024,
        help="larger raw inputs are dead-lettered unread",
        unit="bytes",
        range=">= 1",
    )
    dlq_original_bytes: int = setting(
        64 * 1024,
        help="original bytes kept in a dead letter (rest cut)",
        unit="bytes",
        range=">= 0",
    )
    text_unit: str = setting(
        "paragraph",
        help="plain-text files: one doc per file, paragraph or line",
        choices=("file", "paragraph", "line"),
    )

    def validate(self) -> None:
        if self.max_doc_chars < 1:
            raise ValueError("ingest.max_doc_chars must be >= 1")
        if self.oversize not in ("dlq", "split"):
            raise ValueError(f"ingest.oversize must be 'dlq' or 'split', got {self.oversize!r}")
        if self.source_format not in ("json", "text"):
            raise ValueError(
                f"ingest.source_format must be 'json' or 'text', got {self.source_format!r}"
            )
        if self.dedup_window < 0 or self.batch_size < 1:
            raise ValueError("ingest.dedup_window must be >= 0 and ingest.batch_size >= 1")
        if not self.text_field:
            raise ValueError("ingest.text_field must name the field that holds the text")
        if self.max_message_bytes < 1 or self.dlq_original_bytes < 0:
            raise ValueError(
                "ingest.max_message_bytes must be >= 1 and ingest.dlq_original_bytes >= 0"
            )
        if self.text_unit not in ("file", "paragraph", "line"):
            raise ValueError(
                f"ingest.text_unit must be 'file', 'paragraph' or 'line', got {self.text_unit!r}"
            )
