"""Refusing an entry of the expert store: quarantined when it fails an integrity check
(moved to ``<root>/.quarantine/<name>-<ms>/`` with ``reason.json``), skipped and left in
place when it is intact but not this reader's (:data:`~experts.store_refusals.SKIPPED`);
and re-verifying every entry."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from experts.store_refusals import SKIPPED, ExpertRefused, VerifyReport

if TYPE_CHECKING:
    from experts.store import ExpertStore

log = logging.getLogger("experts.store")


def refuse(store: ExpertStore, refused: ExpertRefused) -> ExpertRefused:
    """Quarantine the entry behind ``refused`` (if enabled and present, and the reason
    is an integrity failure), or note it as skipped; return it."""
    store.evict(refused.expert_id)
    name = refused.expert_id
    if refused.reason in SKIPPED:
        if name not in store._skipped:
            log.warning("%s; left in place", refused)
        store._skipped[name] = refused
        return refused
    if not store.quarantine_enabled or name not in store:
        log.warning("%s", refused)
        return refused
    try:
        dest = store.backend.quarantine(name)
    except OSError as exc:  # another process moved it first
        log.warning("could not quarantine %s in %s: %s", name, store.where, exc)
        return refused
    if dest is None:
        return refused
    refused.quarantined = dest
    quarantined_ms = int(time.time() * 1000)
    store.backend.write_reason(dest, {**refused.to_dict(), "quarantined_ms": quarantined_ms})
    log.error("%s", refused)
    prune(store)
    return refused


def prune(store: ExpertStore) -> None:
    store.backend.prune_quarantine(store.quarantine_keep, store.quarantine_max_age_s)


def verify(store: ExpertStore, quarantine: bool | None = None) -> VerifyReport:
    """:meth:`experts.store.ExpertStore.verify`."""
    saved = store.quarantine_enabled
    if quarantine is not None:
        store.quarantine_enabled = quarantine
    report = VerifyReport()
    try:
        for expert_id in store.ids():
            try:
                store._load(expert_id, refresh=True)
            except ExpertRefused as exc:
                report.refused.append(exc.to_dict())
            else:
                report.ok.append(expert_id)
    finally:
        store.quarantine_enabled = saved
    return report
