"""Health: what the server serves and how it is doing (``/health``, ``/experts``)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from experts.serving import ExpertServer


def experts(server: ExpertServer) -> list[dict[str, Any]]:
    return [m.public() for m in server.table.manifests.values()]


def health(server: ExpertServer) -> dict[str, Any]:
    table = server.table
    return {
        "status": "ok",
        "trunk": server.trunk.fingerprint,
        "trunk_family": server.trunk.family,
        "experts": len(table),
        "table_version": table.version,
        "domains": len(server.domains),
        "domain_version": server.domains.version,
        # experts the gate cannot reach: their domain is not an active row of the table
        "experts_without_domain": sorted(
            e for e, m in table.manifests.items() if not _routable(server, m.domain_id)
        ),
        "requests": server.requests,
        "failed_requests": server.failed_requests,
        "refusals": list(server.refusals)[-20:],
        "cache": server.store.cache_info(),
        "uptime_s": round(time.time() - server.started, 1),
    }


def _routable(server: ExpertServer, domain_id: str) -> bool:
    row = server.domains.get(domain_id)
    return row is not None and row.status == "active"
