"""Configuration of the ingest stage (section ``[ingest]`` of worx.toml)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class IngestConfig:
    max_doc_chars: int = 20_000  # longer texts are dead-lettered, or split with oversize="split"
    oversize: str = "dlq"  # "dlq" | "split"
    dedup_window: int = 100_000  # how many recent doc ids are remembered to drop duplicates
    strict: bool = False  # dead-letter input objects with fields the mapping does not name
    text_field: str = "text"
    id_field: str = "id"  # empty string: always use the content hash
    domain_field: str = ""  # labelled data only (evaluation); empty: no label
    meta_fields: tuple[str, ...] = ()  # input fields copied (as strings) into Doc.meta
    source_topics: tuple[str, ...] = ()  # company topics consumed by `worx connect`
    source_format: str = "json"  # "json" | "text": how company topic values are read
    # `worx connect` may read from another cluster than the one worx.docs lives on:
    source_bootstrap_servers: str = ""  # empty: the same cluster as [kafka]
    source_client: dict[str, str] = field(default_factory=dict)  # librdkafka settings there
    source_group: str = "worx-connect"  # consumer group of the connector on the source
    batch_size: int = 500  # records per produce/flush/offset-store cycle
    max_message_bytes: int = 4 * 1024 * 1024  # larger raw inputs are dead-lettered unread
    dlq_original_bytes: int = 64 * 1024  # original bytes kept in a dead letter (rest cut)
    text_unit: str = "paragraph"  # plain-text files: "file" | "paragraph" | "line" per doc

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
