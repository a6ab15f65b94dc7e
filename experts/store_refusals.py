"""Why the expert store refuses an expert (:class:`ExpertRefused`, one of :data:`REASONS`),
and the report of re-verifying a whole store (:class:`VerifyReport`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REASONS = (
    "corrupt",
    "truncated",
    "bad_manifest",
    "unsafe_id",
    "wrong_trunk",
    "newer_schema",
    "duplicate_id",
    "missing",
)
SKIPPED = frozenset({"wrong_trunk", "newer_schema"})  # intact entries this reader cannot use


class ExpertRefused(Exception):
    """An expert that will not be stored or loaded, and why.

    Attributes
    ----------
    reason : str
        One of :data:`REASONS`.
    expert_id : str
        The id as given (possibly unsafe: never use it as a path).
    quarantined : Path, str or None
        Where the refused entry was moved (a directory, or an ``s3://`` prefix), if it was.
    """

    def __init__(
        self, reason: str, expert_id: str, detail: str, quarantined: Path | str | None = None
    ) -> None:
        assert reason in REASONS, reason
        self.reason = reason
        self.expert_id = expert_id
        self.detail = detail
        self.quarantined = quarantined
        super().__init__(reason, expert_id, detail)

    def __str__(self) -> str:
        where = f" (quarantined to {self.quarantined})" if self.quarantined else ""
        return f"expert {self.expert_id!r} refused [{self.reason}]: {self.detail}{where}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "expert_id": self.expert_id,
            "reason": self.reason,
            "detail": self.detail,
            "quarantined": str(self.quarantined) if self.quarantined else None,
        }


@dataclass
class VerifyReport:
    """Outcome of re-hashing every expert in the store."""

    ok: list[str] = field(default_factory=list)
    refused: list[dict[str, Any]] = field(default_factory=list)  # ExpertRefused.to_dict() items

    @property
    def checked(self) -> int:
        return len(self.ok) + len(self.refused)

    def to_dict(self) -> dict[str, Any]:
        return {"checked": self.checked, "ok": self.ok, "refused": self.refused}
