"""The one error a record decode raises (:class:`RecordError`, with a stable ``reason``)."""

from __future__ import annotations


class RecordError(ValueError):
    """A byte string or dict that is not a valid record of the expected type.

    ``reason`` is a short stable code (for a dead letter's ``reason``); ``str(error)``
    says what was wrong.
    """

    reason: str = "invalid_record"

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        if reason is not None:
            self.reason = reason


class UnknownSchemaVersion(RecordError):
    reason = "unknown_schema_version"
