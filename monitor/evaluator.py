"""The evaluator: after every expert registration (and on demand), one row of the matrix.

Row ``i`` is the serving mixture after the ``i``-th registration evaluated on every
domain's held-out set (row 0: the trunk alone). Each document is routed exactly as the
server routes it with the experts of that step: its domain by the domain table (the
``worx.domains`` the server follows too), then only that domain's experts, or the trunk
alone (:class:`router.gate.Gate`); its mean token loss is measured.

Only what a step can change is scored. The trunk is frozen, experts are write-once and
routing is deterministic, so a document's loss is known once measured under the same
routing and the same expert bytes (monitor/loss_cache.py): every held-out document is
routed again at every step (cheap), and scored only when its routing or its experts'
sha256 is new to it: the new expert's domain, documents the registration (or a change of
the domain table) moved, documents new in their set. Weights are checked on a schedule
(monitor/verify.py): the trunk and the new expert at every step, every expert every
``verify_every`` steps, on demand and at the end of a run; any change found, or a refusal
by the store, is weight forgetting, and that step is scored afresh.

Experts are write-once, so the mixture of any earlier step can be rebuilt exactly: when a
domain's held-out set is new or has changed, its whole column is re-evaluated (back-filled)
so that every column compares the same documents across steps and the matrix stays full.
A back-filled or re-evaluated row uses the domain table as it is now (the table's history
is not kept): it answers "what would this step's experts give under today's domains".
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Any, Protocol

from experts.store import ExpertRefused
from monitor.doc_scores import HeldoutScorer, mean_loss
from monitor.heldout import HeldoutSets
from monitor.history import MatrixHistory, perplexity
from monitor.metrics import as_matrix, routing_change, routing_moves, summarise
from monitor.records import EvalRow
from monitor.routing import experts_from_history
from monitor.store_view import StoreExperts, check_stored
from monitor.verify import WeightVerifier
from router.gate import DomainExperts, GateDecision

log = logging.getLogger(__name__)


class Router(Protocol):
    """Routes held-out texts the way the server does: a :class:`GateDecision` per text."""

    def decide(self, texts: list[str], experts: DomainExperts) -> list[GateDecision]: ...


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
        :class:`Router` (default in production: ``monitor.routing.GateRouter``; its
        likelihood step should score with :attr:`likelihood_mixture`, which remembers).
    max_tokens, batch_size
        Tokens scored per document (its first ``max_tokens``), documents per forward.
    backfill
        Re-evaluate earlier rows for a domain whose held-out set is new or changed.
    domains_wait_s
        How long a registration waits for its domain's row in the router's domain table
        (the table is followed on another thread; without the row the expert would be
        evaluated as unreachable, which the server would not do once it has the row).
    incremental
        Score only the documents whose (text, routing, experts' sha256) has no measured
        loss yet (monitor/loss_cache.py); False: every document at every step.
    verify_every, verify_every_s
        Every expert's weights are re-verified every ``verify_every`` steps and at the first
        step ``verify_every_s`` seconds after the last full check (monitor/verify.py);
        the trunk and each step's new expert are checked at every step.
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
        incremental: bool = True,
        verify_every: int = 10,
        verify_every_s: float = 600.0,
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
        self.verifier = WeightVerifier(
            trunk, store, self.loaded, history.data["tensor_hashes"], verify_every, verify_every_s
        )
        self.scorer = HeldoutScorer(
            trunk, self.mixture, router, heldout, self.verifier.shas, max_tokens, batch_size,
            incremental,
        )  # fmt: skip
        # what GateRouter.use_likelihood should be given: the mixture, remembering each head
        self.likelihood_mixture = self.scorer.likelihood_mixture
        self._gate_views: dict[tuple[str, ...], DomainExperts] = {}
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
                self._gate_views.clear()  # views built with it
                raise
            return out

    def _rows_through(self, expert_id: str) -> list[EvalRow]:
        rows = self.history.rows("ours")
        steps = [r.step for r in rows if r.arrived_expert == expert_id]
        return rows[: steps[0] + 1] if steps else []

    def evaluate_now(self) -> list[EvalRow]:
        """On demand: row 0 if there is none, else re-check every expert and re-evaluate
        the latest step."""
        with self._lock:
            rows = self.history.rows("ours")
            if not rows:
                return self._evaluate(0, [], None)
            last = rows[-1]
            return self._evaluate(
                last.step, last.expert_ids, last.arrived_expert, replace=True, full_check=True
            )

    def verify_all(self) -> list[str]:
        """Re-verify the trunk and every expert of the latest step now (the end of a run);
        problems found are added to that row's ``weight_changes`` (saved, not emitted)."""
        with self._lock:
            rows = self.history.rows("ours")
            if not rows:
                return []
            last = rows[-1]
            problems, checked = self.verifier.step(last.expert_ids, [], full=True)
            self.history.data["verified"] = {
                "step": last.step,
                "experts": checked,
                "problems": len(problems),
                "at_ms": int(time.time() * 1000),
            }
            if problems:
                self.scorer.forget()
                merged = sorted(set(last.weight_changes) | set(problems))
                self.history.replace(dataclasses.replace(last, weight_changes=merged))
            self.history.save()
            log.info(
                "verified the trunk and %d experts of step %d: %d problems",
                checked,
                last.step,
                len(problems),
            )
            return problems

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
        """The step's experts the server can load, as the gate sees them (immutable; kept
        for the steps a back-fill goes through again)."""
        ids = tuple(e for e in expert_ids if e in self.loaded)
        experts = self._gate_views.get(ids)
        if experts is None:
            if len(self._gate_views) >= 256:
                self._gate_views.clear()
            experts = self._gate_views[ids] = experts_from_history(
                self.history.data["experts"], ids
            )
        return experts

    def check_weights(self, expert_ids: list[str]) -> list[str]:
        """Re-hash the trunk and every expert (memory and disk); have the store re-verify each.

        Returns the problems found (empty: no weight forgetting). Each expert is evicted
        from the store's cache and loaded again, so the store re-checks its sha256 against
        the manifest; a refusal (the store quarantines the entry) is reported too.
        """
        return self.verifier.check(expert_ids)

    def _evaluate(
        self,
        step: int,
        expert_ids: list[str],
        arrived: str | None,
        replace: bool = False,
        full_check: bool = False,
    ) -> list[EvalRow]:
        started, cpu_started = time.perf_counter(), time.process_time()
        scored_before = self.scorer.docs_scored
        full = full_check or self.verifier.due()
        new = [arrived] if arrived else []
        weight_changes, verified = self.verifier.step(expert_ids, new, full)
        if weight_changes:
            self.scorer.forget()
        try:
            with self.scorer.fresh(bool(weight_changes)):
                measured = self._measure(step, expert_ids, replace)
        except ExpertRefused as exc:  # an evicted expert failed its reload: check them all
            log.error("step %d: the store refused an expert while scoring (%s)", step, exc)
            more, verified = self.verifier.step(expert_ids, [], full=True)
            refused = f"store/{exc.expert_id}: refused ({type(exc).__name__}: {exc})"
            self.verifier.found(refused)
            weight_changes = sorted(set(weight_changes) | set(more) | {refused})
            self.scorer.forget()
            with self.scorer.fresh(True):
                measured = self._measure(step, expert_ids, replace)
        detail_now, loss, sizes, (routing_share, routing_delta, moves), stale, backfilled = measured
        info = self.history.data["experts"]
        for row in backfilled:
            self.history.patch(row, "loss", "perplexity", "heldout_size")
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
            routing_moves=moves,
            heldout_size=sizes,
            docs_scored=self.scorer.docs_scored - scored_before,
            experts_verified=verified,
        )
        if replace:
            self.history.replace(row)
        else:
            self.history.append(row, save=False)  # saved below, before the rows go out
        digests = self.history.data["digests"]["ours"]
        for domain in stale:
            digests[domain] = self.heldout.digest(domain)
        self.history.data["detail"]["ours"] = detail_now
        out = self._refresh_summaries({r.step for r in backfilled} | {step})
        cpu_s = time.process_time() - cpu_started
        out = [dataclasses.replace(r, cpu_s=round(cpu_s, 4)) if r.step == step else r for r in out]
        self.history.replace(out[-1])
        self.history.save()
        log.info(
            "evaluated step %d (%d experts, %d domains, %d documents scored, %d experts "
            "verified, %d weight changes) in %.1f s, %.1f CPU s",
            step,
            len(expert_ids),
            len(loss),
            row.docs_scored,
            verified,
            len(weight_changes),
            time.perf_counter() - started,
            cpu_s,
        )
        return out

    def _measure(self, step: int, expert_ids: list[str], replace: bool) -> tuple:
        """Everything of one step, nothing written: per-document detail, the row's figures,
        the stale domains and the earlier rows they back-fill."""
        digests = self.history.data["digests"]["ours"]
        detail_prev = self.history.data["detail"]["ours"]
        loss: dict[str, float] = {}
        sizes: dict[str, int] = {}
        routing_share: dict[str, float] = {}
        routing_delta: dict[str, float] = {}
        moves: dict[str, dict[str, list[float]]] = {}
        stale: list[str] = []
        detail_now = self.scorer.score(self.heldout.domains(), self._experts(expert_ids))
        for domain, detail in detail_now.items():
            loss[domain] = mean_loss(detail)
            sizes[domain] = len(detail)
            if digests.get(domain) != self.heldout.digest(domain):
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
                if share:
                    moves[domain] = routing_moves(before, detail)
        backfilled: list[EvalRow] = []
        if self.backfill and stale:
            backfilled = self._backfill(self.history.rows("ours")[:step], stale)
        routing = routing_share, routing_delta, moves
        return detail_now, loss, sizes, routing, stale, backfilled

    def _backfill(self, earlier: list[EvalRow], domains: list[str]) -> list[EvalRow]:
        """``domains`` re-evaluated in every earlier row (their held-out set is new/changed);
        the rows are returned, not written."""
        changed: list[EvalRow] = []
        for row in earlier:
            loss = dict(row.loss)
            sizes = dict(row.heldout_size)
            for domain, detail in self.scorer.score(domains, self._experts(row.expert_ids)).items():
                loss[domain] = mean_loss(detail)
                sizes[domain] = len(detail)
            changed.append(
                dataclasses.replace(
                    row,
                    loss=loss,
                    perplexity={d: perplexity(v) for d, v in loss.items()},
                    heldout_size=sizes,
                )
            )
        if earlier:
            log.info("back-filled %s over %d earlier steps", domains, len(earlier))
        return changed

    def _refresh_summaries(self, steps: set[int]) -> list[EvalRow]:
        """Recompute every row's metric summary (earlier columns may have been back-filled,
        a new column or arrival changes every row's); return the rows of ``steps``."""
        m = self.history.matrix("ours")
        loss = as_matrix(m["loss"])  # (steps, domains), once for every row
        summaries = []
        for i in range(loss.shape[0]):
            s = summarise(loss, m["arrivals"], i)
            s["domains"] = m["domains"]
            summaries.append(s)
        self.history.set_summaries("ours", summaries)
        return [r for r in self.history.rows("ours") if r.step in steps]
