"""The evaluator: after every expert registration (and on demand), one row of the matrix.

Row ``i`` is the serving mixture after the ``i``-th registration evaluated on every
domain's held-out set (row 0: the trunk alone). Each document is routed exactly as the
server routes it with the experts of that step: its domain by the domain table (the
``worx.domains`` the server follows too), then only that domain's experts, or the trunk
alone (:class:`router.gate.Gate`); its mean token loss is measured. Before evaluating,
every tensor of the trunk and of every expert of the step is re-hashed, in memory and on
disk, and the store is asked for each earlier expert again: any change, or a refusal by
the store, is weight forgetting.

Experts are write-once, so the mixture of any earlier step can be rebuilt exactly: when a
domain's held-out set is new or has changed, its whole column is re-evaluated (back-filled)
so that every column compares the same documents across steps and the matrix stays full.
A back-filled or re-evaluated row uses the domain table as it is now (the table's history
is not kept): it answers "what would this step's experts give under today's domains".
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from monitor.heldout import HeldoutSets
from monitor.history import MatrixHistory, perplexity
from monitor.metrics import routing_change, summarise
from monitor.records import EvalRow
from monitor.routing import experts_from_history
from monitor.scoring import score_texts
from monitor.weights import WeightWatch, hash_module, hash_safetensors
from router.gate import DomainExperts
from worx.checks import check_id
from worx.records import RecordError

log = logging.getLogger(__name__)


class Router(Protocol):
    """Routes held-out texts the way the server does: ``{expert_id: weight}`` per text."""

    def route(self, texts: list[str], experts: DomainExperts) -> list[dict[str, float]]: ...


def check_stored(store: Any, expert_id: str, domain_id: str, sha256: str = "") -> None:
    """Refuse a registration the store does not back: an unsafe or unknown id, a manifest
    of another domain or (when given) another sha256. Raises :class:`RecordError`."""
    check_id("expert_id", expert_id)
    if expert_id not in store:
        raise RecordError(
            f"expert {expert_id} is registered but not in the store at {store.root}",
            reason="unknown_expert",
        )
    try:
        manifest = store.manifest(expert_id)
    except Exception as exc:  # noqa: BLE001 - any refusal by the store is the finding
        raise RecordError(
            f"expert {expert_id}: the store refuses its manifest ({exc})",
            reason=str(getattr(exc, "reason", "bad_manifest")),
        ) from exc
    if manifest.domain_id != domain_id:
        raise RecordError(
            f"expert {expert_id} is registered for domain {domain_id}, its manifest says "
            f"{manifest.domain_id}",
            reason="domain_mismatch",
        )
    if sha256 and manifest.sha256 != sha256:
        raise RecordError(
            f"expert {expert_id}: the registration names sha256 {sha256[:12]}..., the store "
            f"holds {manifest.sha256[:12]}...",
            reason="sha256_mismatch",
        )


class StoreExperts(Mapping[str, Any]):
    """The experts the mixture may serve, by id, each resolved through the store's LRU on
    lookup: nothing is held here, so loaded experts stay within the store's byte budget
    (an evicted one is loaded, and verified, again when next used)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self._ids: set[str] = set()

    def add(self, expert_id: str) -> None:
        self._ids.add(expert_id)

    def discard(self, expert_id: str) -> None:
        self._ids.discard(expert_id)

    def __getitem__(self, expert_id: str) -> Any:
        if expert_id not in self._ids:
            raise KeyError(expert_id)
        return self.store.get(expert_id)

    def __contains__(self, expert_id: object) -> bool:
        return expert_id in self._ids

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._ids))

    def __len__(self) -> int:
        return len(self._ids)


class Evaluator:
    """Builds the ``ours`` run of a :class:`MatrixHistory` from an expert store.

    Parameters
    ----------
    trunk
        ``experts.trunk.Trunk`` (frozen).
    store
        ``experts.store.ExpertStore``: ``get(expert_id) -> Expert``, ``weights_path``.
    heldout, history
        Held-out sets and the history file (both on disk).
    router
        :class:`Router` (default in production: ``monitor.routing.GateRouter``).
    max_tokens, batch_size
        Tokens scored per document (its first ``max_tokens``), documents per forward.
    backfill
        Re-evaluate earlier rows for a domain whose held-out set is new or changed.
    domains_wait_s
        How long a registration waits for its domain's row in the router's domain table
        (the table is followed on another thread; without the row the expert would be
        evaluated as unreachable, which the server would not do once it has the row).
    """

    def __init__(
        self,
        trunk: Any,
        store: Any,
        heldout: HeldoutSets,
        history: MatrixHistory,
        router: Router,
        max_tokens: int = 128,
        batch_size: int = 8,
        backfill: bool = True,
        domains_wait_s: float = 30.0,
    ) -> None:
        from experts.mixture import Mixture

        self.trunk = trunk
        self.store = store
        self.heldout = heldout
        self.history = history
        self.router = router
        self.max_tokens = max_tokens
        self.batch_size = batch_size
        self.backfill = backfill
        self.domains_wait_s = domains_wait_s
        self.loaded = StoreExperts(store)  # what the mixture serves (inside the LRU budget)
        self.mixture = Mixture(trunk, self.loaded)
        self.watch = WeightWatch(history.data["tensor_hashes"])
        self._lock = threading.RLock()

    # --- entry points -----------------------------------------------------------------
    def on_registration(
        self,
        expert_id: str,
        domain_id: str,
        centroid: list[float],
        sha256: str = "",
        created_ms: int | None = None,
    ) -> list[EvalRow]:
        """Evaluate the mixture with the new expert added; return the rows written.

        A redelivery evaluates nothing and returns this registration's rows again (steps 0
        to its own, as they are now): the process may have died after the history was
        saved and before the rows were flushed to ``worx.metrics``. Rows are keyed
        ``<run>:<step>``; a later copy of a key supersedes an earlier one.

        ``created_ms``: the manifest's (the registration carries it; read from the store
        when None). The gate prefers a domain's newest expert on a tie, as the server does.

        Raises:
            RecordError: the store holds no such expert, or another one (domain, sha256):
                nothing is written to the history (a fake registration is no step).
        """
        if expert_id not in self.history.data["experts"]:  # a replay needs no domain
            check_stored(self.store, expert_id, domain_id, sha256)
            self._wait_for_domain(expert_id, domain_id)
        with self._lock:
            experts = self.history.data["experts"]
            if expert_id in experts:
                log.info("expert %s already evaluated (redelivery): its rows again", expert_id)
                return self._rows_through(expert_id)
            dims = {len(e["centroid"]) for e in experts.values()}
            if dims and dims != {len(centroid)}:
                raise ValueError(
                    f"the centroid of expert {expert_id} has {len(centroid)} dimensions, the "
                    f"other experts' have {sorted(dims)}: every centroid must come from the "
                    "same embedder (router.embed_dim)"
                )
            experts[expert_id] = {
                "domain_id": domain_id,
                "centroid": [float(v) for v in centroid],
                "sha256": sha256,
                "created_ms": int(time.time() * 1000),
                "manifest_created_ms": self._manifest_created_ms(expert_id, created_ms),
            }
            out: list[EvalRow] = []
            try:
                rows = self.history.rows("ours")
                if not rows:
                    out += self._evaluate(0, [], None)
                    rows = self.history.rows("ours")
                out += self._evaluate(len(rows), rows[-1].expert_ids + [expert_id], expert_id)
            except BaseException:
                experts.pop(expert_id, None)  # not evaluated: a redelivery must try again
                self.loaded.discard(expert_id)
                raise
            return out

    def _rows_through(self, expert_id: str) -> list[EvalRow]:
        rows = self.history.rows("ours")
        steps = [r.step for r in rows if r.arrived_expert == expert_id]
        return rows[: steps[0] + 1] if steps else []

    def evaluate_now(self) -> list[EvalRow]:
        """On demand: row 0 if there is none, else re-check and re-evaluate the latest step."""
        with self._lock:
            rows = self.history.rows("ours")
            if not rows:
                return self._evaluate(0, [], None)
            last = rows[-1]
            return self._evaluate(last.step, last.expert_ids, last.arrived_expert, replace=True)

    def _wait_for_domain(self, expert_id: str, domain_id: str) -> None:
        wait = getattr(self.router, "wait_for_domains", None)
        if wait is not None and wait([domain_id], self.domains_wait_s):
            log.warning(
                "expert %s: domain %s has no row in the domain table after %.0f s; its "
                "documents are evaluated as the server would route them without it",
                expert_id,
                domain_id,
                self.domains_wait_s,
            )

    def _manifest_created_ms(self, expert_id: str, given: int | None) -> int:
        if given is not None:
            return int(given)
        try:
            return int(self.store.manifest(expert_id).created_ms)
        except Exception:  # noqa: BLE001 - unreadable now: check_weights reports it
            return 0

    # --- one step ---------------------------------------------------------------------
    def _experts(self, expert_ids: list[str]) -> DomainExperts:
        """The step's experts the server can load, as the gate sees them."""
        info = self.history.data["experts"]
        return experts_from_history(info, [e for e in expert_ids if e in self.loaded])

    def check_weights(self, expert_ids: list[str]) -> list[str]:
        """Re-hash the trunk and every expert (memory and disk); have the store re-verify each.

        Returns the problems found (empty: no weight forgetting). Each expert is evicted
        from the store's cache and loaded again, so the store re-checks its sha256 against
        the manifest; a refusal (the store quarantines the entry) is reported too.
        """
        current = hash_module("trunk", self.trunk.model)
        problems: list[str] = []
        for eid in expert_ids:
            try:  # first the bytes on disk, before a refusal moves the entry aside
                path = self.store.weights_path(eid)
                current.update(hash_safetensors(f"file/{eid}", path))
            except Exception as exc:
                problems.append(f"file/{eid}: unreadable ({type(exc).__name__}: {exc})")
            self.store.evict(eid)
            try:
                expert = self.store.get(eid)
            except Exception as exc:  # the store refusing an expert is the finding itself
                problems.append(f"store/{eid}: refused ({type(exc).__name__}: {exc})")
                expert = None
                self.loaded.discard(eid)  # the server cannot load it either
            if expert is not None:
                self.loaded.add(eid)
                current.update(hash_module(f"expert/{eid}", expert))
        prefixes = ["trunk"] + [p for e in expert_ids for p in (f"expert/{e}", f"file/{e}")]
        problems += self.watch.check(current, prefixes)
        if problems:
            log.error("WEIGHT FORGETTING: %d problems: %s", len(problems), problems[:5])
        return sorted(problems)

    def _score_domain(self, domain: str, expert_ids: list[str]) -> dict[str, dict]:
        docs = self.heldout.docs(domain)
        texts = [d.text for d in docs]
        experts = self._experts(expert_ids)
        routing = self.router.route(texts, experts) if len(experts) else [{} for _ in texts]
        scores = score_texts(
            self.mixture.token_losses,
            self.trunk.tokenizer,
            texts,
            routing,
            max_tokens=self.max_tokens,
            batch_size=self.batch_size,
            device=self.trunk.device,
        )
        return {
            d.doc_id: {"loss": loss, "tokens": n, "routing": r}
            for d, loss, n, r in zip(docs, scores.doc_loss, scores.doc_tokens, routing, strict=True)
        }

    @staticmethod
    def _mean(detail: dict[str, dict]) -> float:
        total = sum(v["tokens"] for v in detail.values())
        if total == 0:
            raise ValueError("held-out documents too short to score (need >= 2 tokens)")
        return sum(v["loss"] * v["tokens"] for v in detail.values()) / total

    def _evaluate(
        self, step: int, expert_ids: list[str], arrived: str | None, replace: bool = False
    ) -> list[EvalRow]:
        started = time.perf_counter()
        weight_changes = self.check_weights(expert_ids)
        info = self.history.data["experts"]
        digests = self.history.data["digests"]["ours"]
        detail_prev = self.history.data["detail"]["ours"]
        loss: dict[str, float] = {}
        sizes: dict[str, int] = {}
        routing_share: dict[str, float] = {}
        routing_delta: dict[str, float] = {}
        detail_now: dict[str, dict] = {}
        stale: list[str] = []
        for domain in self.heldout.domains():
            detail = self._score_domain(domain, expert_ids)
            detail_now[domain] = detail
            loss[domain] = self._mean(detail)
            sizes[domain] = len(detail)
            digest = self.heldout.digest(domain)
            if digests.get(domain) != digest:
                stale.append(domain)
            elif domain in detail_prev and not replace:
                before = detail_prev[domain]
                share, delta, _ = routing_change(
                    {k: v["routing"] for k, v in before.items()},
                    {k: v["routing"] for k, v in detail.items()},
                    {k: v["loss"] for k, v in before.items()},
                    {k: v["loss"] for k, v in detail.items()},
                )
                routing_share[domain] = share
                routing_delta[domain] = delta
        out: list[EvalRow] = []
        rows = self.history.rows("ours")
        if self.backfill and stale:
            out += self._backfill(rows[:step], stale)
        row = EvalRow(
            run="ours",
            step=step,
            expert_ids=list(expert_ids),
            loss=loss,
            perplexity={d: perplexity(v) for d, v in loss.items()},
            weight_changes=weight_changes,
            routing_changed=routing_share,
            created_ms=int(time.time() * 1000),
            arrived_expert=arrived,
            arrived_domain=info[arrived]["domain_id"] if arrived else None,
            routing_loss_delta=routing_delta,
            heldout_size=sizes,
        )
        if replace:
            self.history.replace(row)
        else:
            self.history.append(row)
        for domain in stale:
            digests[domain] = self.heldout.digest(domain)
        self.history.data["detail"]["ours"] = detail_now
        out = [r for r in out if r.step != step] + [row]
        out = self._refresh_summaries({r.step for r in out})
        self.history.save()
        log.info(
            "evaluated step %d (%d experts, %d domains, %d weight changes) in %.1f s",
            step,
            len(expert_ids),
            len(loss),
            len(weight_changes),
            time.perf_counter() - started,
        )
        return out

    def _backfill(self, earlier: list[EvalRow], domains: list[str]) -> list[EvalRow]:
        """Re-evaluate ``domains`` in every earlier row (their held-out set is new/changed)."""
        changed: list[EvalRow] = []
        for row in earlier:
            loss = dict(row.loss)
            sizes = dict(row.heldout_size)
            for domain in domains:
                detail = self._score_domain(domain, row.expert_ids)
                loss[domain] = self._mean(detail)
                sizes[domain] = len(detail)
            new = EvalRow.from_dict(
                {
                    **row.to_dict(),
                    "loss": loss,
                    "perplexity": {d: perplexity(v) for d, v in loss.items()},
                    "heldout_size": sizes,
                }
            )
            self.history.replace(new)
            changed.append(new)
        if earlier:
            log.info("back-filled %s over %d earlier steps", domains, len(earlier))
        return changed

    def _refresh_summaries(self, steps: set[int]) -> list[EvalRow]:
        """Recompute every row's metric summary (earlier columns may have been back-filled)."""
        m = self.history.matrix("ours")
        out: list[EvalRow] = []
        for row in self.history.rows("ours"):
            s = summarise(m["loss"], m["arrivals"], row.step)
            s["domains"] = m["domains"]
            new = EvalRow.from_dict({**row.to_dict(), "summary": s})
            self.history.replace(new)
            if row.step in steps:
                out.append(new)
        return out
