"""``manifest.json`` of a stored expert: what it is, what it was built on, how to verify it."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from experts.expert import ExpertConfig, ExpertConfigError
from experts.records import ExpertRegistration
from worx.ids import UnsafeIdError, validate_id
from worx.records import Record, RecordError

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
MAX_MANIFEST_BYTES = 1 << 20  # ours are a few KiB; a larger file is not one of ours


class ManifestError(RecordError):
    reason = "bad_manifest"


class NewerManifest(ManifestError):
    """A manifest written by a newer build: not damaged, just not readable by this one."""

    reason = "newer_schema"


@dataclass(frozen=True)
class Manifest(Record):
    """One expert in the store (``<root>/<expert_id>/manifest.json``)."""

    SCHEMA_VERSION = 1

    expert_id: str
    domain_id: str
    centroid: list[float]  # L2-normalised domain centroid, in the router embedder's space
    trunk_fingerprint: str  # the expert only ever loads onto this trunk
    config: dict  # ExpertConfig.to_dict()
    hidden_size: int  # the trunk width the adapters were built for
    sha256: str  # of weights.safetensors
    size_bytes: int  # of weights.safetensors (a shorter file is "truncated")
    num_params: int
    parent_expert_id: str | None = None  # set when branched from another expert
    job_id: str | None = None  # the training job that produced it
    summary: dict = field(default_factory=dict)  # training summary (losses, perplexities)
    created_ms: int = 0

    def expert_config(self) -> ExpertConfig:
        return ExpertConfig.from_dict(self.config)

    def check(self) -> Manifest:
        """Validate every field beyond its type; :class:`ManifestError` says what is wrong."""
        problems = []
        for name in ("expert_id", "domain_id"):
            try:
                validate_id(getattr(self, name), kind=name)
            except UnsafeIdError as exc:
                problems.append(str(exc))
        if self.parent_expert_id is not None:
            try:
                validate_id(self.parent_expert_id, kind="parent_expert_id")
            except UnsafeIdError as exc:
                problems.append(str(exc))
        if not _HEX64.match(self.sha256):
            problems.append(f"sha256 {self.sha256!r} is not 64 lower-case hex digits")
        if not self.trunk_fingerprint:
            problems.append("trunk_fingerprint is empty")
        if not self.centroid or not all(
            isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            for v in self.centroid
        ):
            problems.append("centroid must be a non-empty list of finite numbers")
        if self.hidden_size < 1 or self.size_bytes < 1 or self.num_params < 1:
            problems.append("hidden_size, size_bytes and num_params must be positive")
        try:
            self.expert_config()
        except ExpertConfigError as exc:
            problems.append(f"config: {exc}")
        if problems:
            raise ManifestError(
                f"manifest of {self.expert_id!r} is invalid: " + "; ".join(problems)
            )
        return self

    @classmethod
    def parse(cls, raw: bytes | str) -> Manifest:
        """Decode and fully validate; any failure is a :class:`ManifestError`.

        A ``schema_version`` above this build's raises :class:`NewerManifest` (a subclass):
        the entry is intact, the reader is too old.
        """
        if len(raw) > MAX_MANIFEST_BYTES:
            raise ManifestError(f"manifest has {len(raw)} bytes, more than {MAX_MANIFEST_BYTES}")
        try:
            # NaN/Infinity as null: older writers put Infinity in a summary (a typed number
            # that is null is still refused)
            body = json.loads(raw, parse_constant=lambda _: None)
        except (ValueError, RecursionError) as exc:  # JSON and Unicode errors are ValueErrors
            raise ManifestError(f"manifest is not JSON ({type(exc).__name__}: {exc})") from exc
        version = body.get("schema_version") if isinstance(body, dict) else None
        if isinstance(version, int) and not isinstance(version, bool):
            if version > cls.SCHEMA_VERSION:
                raise NewerManifest(
                    f"manifest schema_version {version} is newer than this build reads "
                    f"({cls.SCHEMA_VERSION}); upgrade worx to use this expert"
                )
        try:
            return cls.from_dict(body).check()
        except ManifestError:
            raise
        except Exception as exc:  # noqa: BLE001 - any decode failure is a bad manifest
            raise ManifestError(f"{type(exc).__name__}: {exc}") from exc

    def registration(self) -> ExpertRegistration:
        """The ``worx.experts`` record announcing this expert."""
        return ExpertRegistration(
            expert_id=self.expert_id,
            domain_id=self.domain_id,
            sha256=self.sha256,
            trunk_fingerprint=self.trunk_fingerprint,
            centroid=list(self.centroid),
            parent_expert_id=self.parent_expert_id,
            job_id=self.job_id,
            num_params=self.num_params,
            summary=dict(self.summary),
            created_ms=self.created_ms,
        )

    def public(self) -> dict[str, Any]:
        """A short description (for listings): everything but the centroid."""
        body = self.to_dict()
        body.pop("centroid")
        return body
