"""Configuration of the ingest stage (section ``[ingest]`` of worx.toml)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class IngestConfig:
    max_doc_chars: int = 20_000  # longer texts are dead-lettered, or split with oversize="split"
    oversize: str = "dlq"  # "dlq" | "split"
    dedup_window: int = 100_000  # how many recent doc ids are remembered to drop duplicates
    strict: bool = False  # dead-letter input objects with fields the mapping does not name
    text_field: str = "text"
    id_field: str = "id"  # empty string: always use the content hash
    domain_field: str = ""  # labelled data only (evaluation); empty: no label
    source_topics: tuple[str, ...] = ()  # company topics consumed by `worx connect`
    source_format: str = "json"  # "json" | "text": how company topic values are read
    batch_size: int = 500  # records per produce/flush/offset-store cycle

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
