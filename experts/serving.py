"""Serving: score and generate with the mixture, and register experts while serving.

:class:`ExpertServer` holds the current :class:`~experts.table.ExpertTable` behind one
reference. ``register`` verifies the expert fully (manifest, trunk, sha256, load into the
LRU cache) *before* building the next table and swapping the reference, so the first
request that is routed to a new expert finds it loaded, and a request already running
keeps the table it started with. Nothing in a registration can fail a request: a refused
expert is reported (``refusals``) and never enters a table. If an expert that was
registered fails its re-verification on a later load (the file changed on disk), it is
quarantined, dropped from the table, and the request is served again without it.

Routing goes through the domain table (``worx.domains``, followed into :attr:`domains`):
a request's text gets its domain by the route stage's rule, and only that domain's
experts can serve it (:class:`router.gate.Gate`). An expert whose domain the server does
not know (yet) is served to nobody by the gate; ``/health`` lists it.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from experts.decoding import UNFINISHED, Continuation, decode, pieces
from experts.expert import Expert
from experts.likelihood_routing import LikelihoodRouter
from experts.manifest import Manifest
from experts.mixture import Mixture, next_token_losses
from experts.records import ExpertRegistration
from experts.sampling import Sampling, sample, steps, stop_ids_of
from experts.store import ExpertRefused, ExpertStore
from experts.table import ExpertTable
from experts.trunk import Trunk
from router.explain import domain_name, explain_route, shown
from router.gate import Gate, GateDecision
from router.table import DomainTable
from worx.ids import UnsafeIdError, validate_id

log = logging.getLogger(__name__)


class RequestError(ValueError):
    """A request the server cannot serve as asked (HTTP 400), with what to change."""


@dataclass(frozen=True)
class RegisterOutcome:
    expert_id: str
    status: str  # "registered" | "unchanged" | "refused" | "removed"
    table_version: int
    elapsed_ms: float
    refusal: dict[str, Any] | None = None  # ExpertRefused.to_dict() when refused

    def to_dict(self) -> dict[str, Any]:
        return {
            "expert_id": self.expert_id,
            "status": self.status,
            "table_version": self.table_version,
            "elapsed_ms": round(self.elapsed_ms, 3),
            "refusal": self.refusal,
        }


class ExpertServer:
    """Mixture inference over a hot-swappable, immutable expert table.

    Parameters
    ----------
    trunk : Trunk
        The frozen trunk.
    store : ExpertStore
        Opened with ``trunk.fingerprint``; every expert is loaded (and verified) from it.
    embedder : object with ``embed(list[str]) -> (N, dim)``
        The router's embedder (the same the stream uses), for the gate.
    gate : Gate
        Turns a document embedding into expert weights, through ``domains``.
    domains : DomainTable, optional
        The domain table the gate decides by (the caller feeds it from ``worx.domains``,
        e.g. with :class:`topology.runtimes.table_follower.TableFollower`); a new empty one if
        None: every text is then served by the trunk alone until domains arrive.
    max_tokens, max_new_tokens : int
        Longest scored text (longer ones are cut, and say so) and generation bound.
    likelihood : LikelihoodRouter, optional
        Re-ranks the gate's unsure decisions by the candidate experts' likelihood of the
        text (:mod:`experts.likelihood_routing`); None: the gate's decision alone.
    """

    def __init__(
        self,
        trunk: Trunk,
        store: ExpertStore,
        embedder: Any,
        gate: Gate,
        domains: DomainTable | None = None,
        max_tokens: int = 1024,
        max_new_tokens: int = 128,
        likelihood: LikelihoodRouter | None = None,
    ) -> None:
        if store.trunk_fingerprint != trunk.fingerprint:
            raise ValueError("the store must be opened with the trunk's fingerprint")
        self.trunk = trunk
        self.store = store
        self.embedder = embedder
        self.gate = gate
        self.domains = domains if domains is not None else DomainTable()
        config = trunk.model.config
        positions = getattr(config, "max_position_embeddings", None) or getattr(
            config, "n_positions", None
        )
        # never feed the trunk more positions than it has (a longer text is cut, and says so)
        self.max_tokens = min(max_tokens, positions) if positions else max_tokens
        self.max_new_tokens = max_new_tokens
        self.likelihood = likelihood
        self._on_device: dict[str, tuple[Any, Any]] = {}  # id -> (store's expert, device copy)
        self._device_lock = threading.Lock()
        self._table = ExpertTable({}, self._load_expert)
        self._swap_lock = threading.Lock()  # serialises registrations, never requests
        self.refusals: deque[dict[str, Any]] = deque(maxlen=1000)
        self.requests = 0
        self.failed_requests = 0
        self.started = time.time()

    # ------------------------------------------------------------------ table
    @property
    def table(self) -> ExpertTable:
        """The current table (a request should read this once and keep it)."""
        return self._table

    def rebuild_from_store(self) -> ExpertTable:
        """Start from every valid expert in the store (restart path); refusals are reported."""
        manifests: dict[str, Manifest] = {}
        for expert_id in self.store.ids():
            try:
                manifest = self.store.manifest(expert_id)
                self._check_centroid(manifest)
            except ExpertRefused as exc:
                self._record(exc)
                continue
            manifests[expert_id] = manifest
        with self._swap_lock:
            self._table = ExpertTable(manifests, self._load_expert, self._table.version + 1)
        log.info("expert table rebuilt from the store: %d experts", len(manifests))
        return self._table

    def register(self, registration: ExpertRegistration) -> RegisterOutcome:
        """Verify and load the registered expert, then swap in a table that includes it.

        Never raises for a bad expert: the outcome says ``refused`` with the reason.
        """
        start = time.perf_counter()
        expert_id = registration.expert_id
        with self._swap_lock:
            try:
                manifest = self._verify(registration)
            except ExpertRefused as exc:
                self._record(exc)
                return self._outcome(expert_id, "refused", start, exc.to_dict())
            current = self._table
            existing = current.manifests.get(expert_id)
            if existing is not None and existing.sha256 == manifest.sha256:
                return self._outcome(expert_id, "unchanged", start)
            self._table = current.with_manifest(manifest)
        outcome = self._outcome(expert_id, "registered", start)
        log.info(
            "registered expert %s (table v%d, %.1f ms)",
            expert_id,
            outcome.table_version,
            outcome.elapsed_ms,
        )
        return outcome

    def unregister(self, expert_id: str) -> RegisterOutcome:
        """Drop ``expert_id`` from the table (a tombstone on the topic); the store keeps it."""
        start = time.perf_counter()
        with self._swap_lock:
            if expert_id in self._table:
                self._table = self._table.without(expert_id)
        return self._outcome(expert_id, "removed", start)

    def _verify(self, registration: ExpertRegistration) -> Manifest:
        expert_id = registration.expert_id
        try:
            validate_id(expert_id, kind="expert_id")
        except UnsafeIdError as exc:
            raise ExpertRefused("unsafe_id", str(expert_id), str(exc)) from exc
        if registration.trunk_fingerprint != self.trunk.fingerprint:
            if expert_id in self.store:
                self.store.manifest(expert_id)  # a stored foreign expert: skipped, left in place
            raise ExpertRefused(
                "wrong_trunk",
                expert_id,
                f"registered for trunk {registration.trunk_fingerprint[:12]}..., this server "
                f"runs {self.trunk.fingerprint[:12]}...",
            )
        manifest = self.store.manifest(expert_id)  # bad_manifest / wrong_trunk / missing
        if manifest.sha256 != registration.sha256:
            raise ExpertRefused(
                "duplicate_id",
                expert_id,
                f"the registration names sha256 {registration.sha256[:12]}..., the stored "
                f"expert with this id has {manifest.sha256[:12]}...; ids are write-once",
            )
        self._check_centroid(manifest)
        self._load_expert(expert_id)  # verify sha256 and warm the caches before any request
        return manifest

    def _load_expert(self, expert_id: str) -> Any:
        """The verified expert from the store, on the trunk's device and in its dtype.

        On the CPU in the stored dtype, that is the store's memory-mapped expert itself; a
        copy is made (and kept while the store's LRU keeps the original) otherwise.
        """
        expert = self.store.get(expert_id)
        param = next(expert.parameters())
        if param.device == self.trunk.device and param.dtype == self.trunk.dtype:
            return expert
        with self._device_lock:
            held = self._on_device.get(expert_id)
            if held is None or held[0] is not expert:
                copy = Expert.from_tensors(
                    expert.config,
                    expert.hidden_size,
                    {
                        k: v.to(self.trunk.device, self.trunk.dtype)
                        for k, v in expert.state_dict().items()
                    },
                )
                held = (expert, copy)
                self._on_device[expert_id] = held
            cached = set(self.store.cached_ids())
            for stale in [k for k in self._on_device if k not in cached]:
                del self._on_device[stale]
            return held[1]

    def _check_centroid(self, manifest: Manifest) -> None:
        dim = getattr(self.embedder, "dim", None)
        if dim is not None and len(manifest.centroid) != dim:
            raise ExpertRefused(
                "bad_manifest",
                manifest.expert_id,
                f"centroid has {len(manifest.centroid)} dimensions, the embedder makes {dim}: "
                "it was made with another embedder",
            )

    def _record(self, exc: ExpertRefused) -> None:
        self.refusals.append({**exc.to_dict(), "at_ms": int(time.time() * 1000)})
        log.warning("%s", exc)

    def _outcome(
        self, expert_id: str, status: str, start: float, refusal: dict | None = None
    ) -> RegisterOutcome:
        elapsed = (time.perf_counter() - start) * 1000
        return RegisterOutcome(expert_id, status, self._table.version, elapsed, refusal)

    # ------------------------------------------------------------------ requests
    def route(self, text: str, table: ExpertTable) -> GateDecision:
        """The gate's decision for ``text``: its domain and the experts of ``table`` it gets."""
        return self._route(text, table)[0]

    def _route(
        self, text: str, table: ExpertTable, explain: bool = False
    ) -> tuple[GateDecision, dict[str, Any] | None, dict[str, Any] | None]:
        """The decision, what the likelihood step saw (None: it did not run), and with
        ``explain`` the gate's decision explained (:func:`router.explain.explain_route`)."""
        embedding = self._embed(text)
        experts = table.by_domain
        if explain:
            decision, why = explain_route(embedding, self.domains, experts, self.gate, len(text))
        else:
            decision, why = self.gate.decide(embedding, self.domains, experts, len(text)), None
        if self.likelihood is None or self.likelihood.candidates == 0:
            return decision, None, why
        limit = min(self.likelihood.max_tokens, self.max_tokens)
        chosen, likelihood = self.likelihood.rerank(
            Mixture(self.trunk, table),
            self.gate,
            lambda: self._encode(text, limit)[0],
            embedding,
            self.domains,
            experts,
            decision,
        )
        if why is not None and likelihood is not None:
            why = _with_rerank(why, chosen, likelihood, self.likelihood, self.domains)
        return chosen, likelihood, why

    def _embed(self, text: str) -> np.ndarray:
        return np.asarray(self.embedder.embed([text]))[0]  # (dim,)

    def _weights(
        self,
        text: str,
        table: ExpertTable,
        expert_weights: dict[str, float] | None,
        explain: bool = False,
        domain: str | None = None,
    ) -> tuple[dict[str, float], dict[str, Any]]:
        """The weights to serve ``text`` with, and what the answer says about the routing
        (with ``explain``: the gate's reasons under ``explain``, even when the request named
        its experts). ``domain``: the gate's weights among that domain's experts, whatever
        domain the text itself would get."""
        if domain is not None and expert_weights is None:
            weights = self.gate.domain_weights(self._embed(text), table.by_domain, domain)
            return weights, {"routed_by": "domain", "domain": domain}
        if expert_weights is not None:
            unknown = sorted(set(expert_weights) - set(table))
            if unknown:
                raise RequestError(f"unknown expert(s) {unknown}; GET /experts lists them")
            routing: dict[str, Any] = {"routed_by": "request"}
            if explain:
                # the gate's own choice, for comparison; the perplexity is the request's
                why = self._route(text, table, True)[2]
                routing["explain"] = {**why, "overridden": True, "requested": expert_weights}
            return expert_weights, routing
        decision, likelihood, why = self._route(text, table, explain)
        routing = {
            "routed_by": "gate",
            "domain": decision.domain_id,
            "domain_version": decision.domain_version,
        }
        if likelihood is not None:  # the step re-ranked an unsure decision
            routing["likelihood"] = likelihood
        if why is not None:
            routing["explain"] = why
        return decision.weights, routing

    def _encode(self, text: str, limit: int, keep_tail: bool = False) -> tuple[torch.Tensor, bool]:
        """``(1, T)`` token ids of ``text``, at most ``limit`` (the head, or the tail)."""
        if not isinstance(text, str) or not text:
            raise RequestError("'text' must be a non-empty string")
        ids = self.trunk.tokenizer(text)["input_ids"]
        cut = len(ids) > limit
        ids = ids[len(ids) - limit :] if keep_tail and cut else ids[:limit]
        return torch.tensor([ids], dtype=torch.long, device=self.trunk.device), cut

    def _with_table(self, work):
        """Run ``work(table)`` on the current table; if a registered expert now fails its
        verification, drop it (quarantined by the store) and run again without it."""
        self.requests += 1
        try:
            for _ in range(8):
                table = self._table
                try:
                    return work(table)
                except ExpertRefused as exc:
                    self._record(exc)
                    self.unregister(exc.expert_id)
            raise RuntimeError("too many experts refused while serving one request")
        except RequestError:
            raise
        except Exception:
            self.failed_requests += 1
            raise

    def score(
        self,
        text: str,
        expert_weights: dict[str, float] | None = None,
        explain: bool = False,
        *,
        domain: str | None = None,
        top_logprobs: int | None = None,
    ) -> dict[str, Any]:
        """Per-token loss and perplexity of ``text`` under the mixture the gate picks.

        ``expert_weights`` overrides the gate (names must be registered experts), and
        ``domain`` picks the domain whose experts serve (:meth:`_weights`). With
        ``explain``, the answer's ``explain`` says why (:meth:`explain`), with the
        perplexity of the trunk alone beside the mixture's (one forward of both rows). With
        ``top_logprobs`` (k >= 0), the answer adds ``pieces`` (each token's piece of the
        text, the first token included) and ``top_logprobs`` (per scored token, the k most
        likely tokens' pieces and log-probabilities).
        """
        input_ids, cut = self._encode(text, self.max_tokens)
        if input_ids.shape[1] < 2:
            raise RequestError("'text' must be at least two tokens long to be scored")

        def work(table: ExpertTable) -> dict[str, Any]:
            weights, routing = self._weights(text, table, expert_weights, explain, domain)
            rows = [weights, {}] if explain and weights else [weights]
            batch = input_ids.expand(len(rows), -1)  # (R, T)
            with torch.no_grad():
                logits = Mixture(self.trunk, table).forward(batch, None, rows)  # (R, T, V)
                losses, _ = next_token_losses(logits, batch)
            token_losses = [float(v) for v in losses[0]]
            mean = sum(token_losses) / len(token_losses)
            if explain:
                trunk_mean = float(losses[-1].mean())
                routing["explain"]["perplexity"] = {
                    "with_experts": _perplexity(mean),
                    "trunk_alone": _perplexity(trunk_mean),
                    "tokens": len(token_losses) + 1,
                }
            tokens = self.trunk.tokenizer.convert_ids_to_tokens(input_ids[0].tolist())
            result = {
                "experts": weights,
                **routing,
                "table_version": table.version,
                "tokens": tokens[1:],
                "token_losses": token_losses,
                "mean_loss": mean,
                "perplexity": math.exp(min(mean, 700.0)),
                "truncated": cut,
            }
            if top_logprobs is not None:
                result["pieces"] = pieces(self.trunk.tokenizer, input_ids[0].tolist())
                log_probs = torch.log_softmax(logits[0, :-1].float(), dim=-1)  # (T-1, V)
                result["top_logprobs"] = [self._top(row, top_logprobs) for row in log_probs]
            return result

        return self._with_table(work)

    def explain(self, text: str) -> dict[str, Any]:
        """Why ``text`` gets its domain and experts: the nearest domains (cosine, threshold),
        the rule that decided and why, the likelihood step if it ran, the experts and
        weights, and the perplexity with them and with the trunk alone."""
        result = self.score(text, explain=True)
        return {
            **result["explain"],
            "table_version": result["table_version"],
            "truncated": result["truncated"],
        }

    def generate(
        self,
        text: str,
        max_new_tokens: int = 32,
        expert_weights: dict[str, float] | None = None,
        sampling: Sampling | None = None,
    ) -> dict[str, Any]:
        """Continuation of ``text`` under the mixture the gate picks: greedy, or drawn as
        ``sampling`` says (:mod:`experts.sampling`; the same seed gives the same text)."""
        input_ids, cut = self._prompt(text, max_new_tokens)
        tokenizer = self.trunk.tokenizer

        def work(table: ExpertTable) -> dict[str, Any]:
            weights, routing = self._weights(text, table, expert_weights)
            mixture = Mixture(self.trunk, table)
            model = self.trunk.model
            with torch.no_grad(), mixture.routing([weights]):
                if sampling is None:
                    out = model.generate(
                        input_ids=input_ids,
                        attention_mask=torch.ones_like(input_ids),
                        max_new_tokens=max_new_tokens,
                        do_sample=False,
                        pad_token_id=tokenizer.pad_token_id,
                    )
                    new = out[0, input_ids.shape[1] :].tolist()
                else:
                    new = sample(model, input_ids, max_new_tokens, sampling, stop_ids_of(model))
            return {
                "experts": weights,
                **routing,
                "table_version": table.version,
                "continuation": tokenizer.decode(new, skip_special_tokens=True),
                "new_tokens": len(new),
                "sampling": None if sampling is None else sampling.to_dict(),
                "truncated": cut,
            }

        return self._with_table(work)

    @property
    def max_new_bound(self) -> int:
        """The most tokens one request may generate (``max_new_tokens``, and one position
        left for the prompt)."""
        return min(self.max_new_tokens, self.max_tokens - 1)

    def _prompt(self, text: str, max_new_tokens: int) -> tuple[torch.Tensor, bool]:
        bound = self.max_new_bound
        if not isinstance(max_new_tokens, int) or not 1 <= max_new_tokens <= bound:
            raise RequestError(f"'max_new_tokens' must be an int in [1, {bound}]")
        # the prompt's tail, so that prompt + continuation fit the trunk's positions
        return self._encode(text, self.max_tokens - max_new_tokens, keep_tail=True)

    def complete(
        self,
        text: str,
        max_new_tokens: int = 32,
        expert_weights: dict[str, float] | None = None,
        sampling: Sampling | None = None,
        *,
        domain: str | None = None,
        top_logprobs: int | None = None,
        stop: Sequence[str] = (),
        on_text: Callable[[str], bool] | None = None,
    ) -> dict[str, Any]:
        """Continuation of ``text`` token by token: the most likely token each step, or
        drawn as ``sampling`` says; ended by the trunk's end-of-text token (``finish_reason``
        ``stop``), the first of ``stop`` (cut before it; ``stop``), ``max_new_tokens``
        (``length``), or ``on_text`` answering False (``cancelled``).

        ``on_text(text)`` is called with the text as it becomes safe to show (never part of
        a stop string); the calls join to the answer's ``text``. With ``top_logprobs``
        (k >= 0), ``tokens`` lists each token's piece, log-probability and the k most likely
        tokens of its step (log-probabilities of the mixture's own distribution, before
        any temperature).
        """
        input_ids, cut = self._prompt(text, max_new_tokens)
        tokenizer = self.trunk.tokenizer
        model = self.trunk.model
        end_ids = set(stop_ids_of(model))

        def work(table: ExpertTable) -> dict[str, Any]:
            weights, routing = self._weights(text, table, expert_weights, domain=domain)
            continuation = Continuation(tokenizer, stop)
            scored: list[tuple[float, dict[str, float]]] = []  # per token: its, the top k
            finish = "length"
            with torch.no_grad(), Mixture(self.trunk, table).routing([weights]):
                for token, logits in steps(model, input_ids, max_new_tokens, sampling, end_ids):
                    if top_logprobs is not None:
                        log_probs = torch.log_softmax(logits.float(), dim=-1)  # (V,)
                        scored.append((float(log_probs[token]), self._top(log_probs, top_logprobs)))
                    shown = continuation.add(token)
                    if shown and on_text is not None and on_text(shown) is False:
                        finish = "cancelled"
                        break
                    if continuation.stopped or token in end_ids:
                        finish = "stop"
                        break
            rest = continuation.rest()
            if rest and on_text is not None and finish != "cancelled":
                on_text(rest)
            ids = continuation.ids
            tokens = None
            if top_logprobs is not None:
                tokens, at = [], 0
                for piece, (logprob, top) in zip(pieces(tokenizer, ids), scored, strict=True):
                    if at >= len(continuation.text) and continuation.stopped:
                        break  # the tokens of the stop string
                    tokens.append({"text": piece, "logprob": logprob, "top": top})
                    at += len(piece)
            return {
                "experts": weights,
                **routing,
                "table_version": table.version,
                "text": continuation.text,
                "finish_reason": finish,
                "prompt_tokens": int(input_ids.shape[1]),
                "new_tokens": len(ids),
                "tokens": tokens,
                "sampling": None if sampling is None else sampling.to_dict(),
                "truncated": cut,
            }

        return self._with_table(work)

    def _top(self, log_probs: torch.Tensor, k: int) -> dict[str, float]:
        """The ``k`` most likely tokens of ``log_probs (V,)``, most likely first: each
        token's text alone, or its vocabulary entry where that text is not a whole
        character or another of the k has it (the keys stay one per token)."""
        if k <= 0:
            return {}
        values, ids = torch.topk(log_probs, min(k, log_probs.numel()))
        tokenizer = self.trunk.tokenizer
        top: dict[str, float] = {}
        for token, value in zip(ids.tolist(), values.tolist(), strict=True):
            key = decode(tokenizer, [token])
            if UNFINISHED in key or key in top:
                key = str(tokenizer.convert_ids_to_tokens(token))
            if key in top:
                key = f"<token {token}>"
            top[key] = float(value)
        return top

    # ------------------------------------------------------------------ introspection
    def _routable(self, domain_id: str) -> bool:
        row = self.domains.get(domain_id)
        return row is not None and row.status == "active"

    def experts(self) -> list[dict[str, Any]]:
        return [m.public() for m in self._table.manifests.values()]

    def health(self) -> dict[str, Any]:
        table = self._table
        return {
            "status": "ok",
            "trunk": self.trunk.fingerprint,
            "trunk_family": self.trunk.family,
            "experts": len(table),
            "table_version": table.version,
            "domains": len(self.domains),
            "domain_version": self.domains.version,
            # experts the gate cannot reach: their domain is not an active row of the table
            "experts_without_domain": sorted(
                e for e, m in table.manifests.items() if not self._routable(m.domain_id)
            ),
            "requests": self.requests,
            "failed_requests": self.failed_requests,
            "refusals": list(self.refusals)[-20:],
            "cache": self.store.cache_info(),
            "uptime_s": round(time.time() - self.started, 1),
        }


def _perplexity(mean_loss: float) -> float:
    return round(math.exp(min(mean_loss, 700.0)), 4)


def _with_rerank(
    why: dict[str, Any],
    chosen: GateDecision,
    seen: dict[str, Any],
    step: LikelihoodRouter,
    domains: DomainTable,
) -> dict[str, Any]:
    """The explanation after the likelihood step re-ranked the gate's unsure decision."""
    changed = bool(seen.get("changed"))
    losses = ", ".join(f"{shown(d, domains.get(d))} {v:.3f}" for d, v in seen["losses"].items())
    mixed = seen.get("mixed") or []
    tied = " and ".join(shown(d, domains.get(d)) for d in mixed)
    if mixed:
        verdict = (
            f"{tied} explain it about as well, each at least {step.mix_margin} nats/token "
            "better than the trunk: it gets their experts mixed, no single domain"
        )
    elif changed:
        verdict = f"it moved the text to {shown(chosen.domain_id, domains.get(chosen.domain_id))}"
    else:
        verdict = "no candidate's expert was clearly better: the gate's decision stands"
    why = {
        **why,
        "likelihood": {
            **seen,
            "margin": step.margin,
            "separation": step.separation,
            "mix_margin": step.mix_margin,
            "why": f"the gate was unsure; the likelihood step scored the candidates' experts "
            f"(mean loss per token: trunk {seen['trunk_loss']:.3f}; {losses}): {verdict}",
        },
    }
    if changed:
        why["decision"] = {
            **why["decision"],
            "domain_id": chosen.domain_id,
            "name": domain_name(domains.get(chosen.domain_id)) if chosen.domain_id else None,
            "similarity": round(chosen.similarity, 4),
            "rule": "likelihood",
        }
        why["experts"] = chosen.weights
        why["served_by"] = "experts" if chosen.weights else "trunk"
        name = shown(chosen.domain_id, domains.get(chosen.domain_id))
        why["served_why"] = (
            f"the experts of {tied}, mixed by the likelihood step"
            if mixed
            else f"the experts of {name}, the likelihood step's choice"
        )
    return why
