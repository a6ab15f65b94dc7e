"""A request: what it may ask (:class:`RequestError`), its text's token ids within a bound,
and running it against the current table (again without an expert that fails its
re-verification).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from experts.store import ExpertRefused
from experts.table import ExpertTable
from experts.trunk import Trunk

if TYPE_CHECKING:
    from experts.serving import ExpertServer


class RequestError(ValueError):
    """A request the server cannot serve as asked (HTTP 400), with what to change."""


def encode(
    trunk: Trunk, text: str, limit: int, keep_tail: bool = False
) -> tuple[torch.Tensor, bool]:
    """``(1, T)`` token ids of ``text``, at most ``limit`` (the head, or the tail), and
    whether it was cut."""
    if not isinstance(text, str) or not text:
        raise RequestError("'text' must be a non-empty string")
    ids = trunk.tokenizer(text)["input_ids"]
    cut = len(ids) > limit
    ids = ids[len(ids) - limit :] if keep_tail and cut else ids[:limit]
    return torch.tensor([ids], dtype=torch.long, device=trunk.device), cut


def with_table(server: ExpertServer, work: Callable[[ExpertTable], Any]) -> Any:
    """Run ``work(table)`` on the current table; if a registered expert now fails its
    verification, drop it (quarantined by the store) and run again without it."""
    server.requests += 1
    try:
        for _ in range(8):
            table = server.table
            try:
                return work(table)
            except ExpertRefused as exc:
                server.registry.record(exc)
                server.unregister(exc.expert_id)
        raise RuntimeError("too many experts refused while serving one request")
    except RequestError:
        raise
    except Exception:
        server.failed_requests += 1
        raise
