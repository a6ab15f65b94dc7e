"""Serving: score and generate with the mixture, and register experts while serving.

:class:`ExpertServer` is the composition its callers use; each job is a module of its own:

* :mod:`~experts.serving.registry`: the table of loaded experts, and registering into it
  (verified and loaded before the table is swapped; a refused expert never enters it);
* :mod:`~experts.serving.routing`: a request's text to its domain and experts;
* :mod:`~experts.serving.scoring`: per-token loss and perplexity;
* :mod:`~experts.serving.generation`: continuations (``generate``, ``complete``);
* :mod:`~experts.serving.score_batcher` and :mod:`~experts.serving.decode_batch`: with
  batching, concurrent requests share forwards (scoring rows gathered into one padded
  forward; generations as one running batch they join and leave between decode steps);
* :mod:`~experts.serving.explain`: why a text gets its domain and experts;
* :mod:`~experts.serving.health`: ``/health`` and ``/experts``;
* :mod:`~experts.serving.request`: :class:`RequestError`, token ids, and running a request
  on the current table.

Nothing in a registration can fail a request. If an expert that was registered fails its
re-verification on a later load (the file changed on disk), it is quarantined, dropped from
the table, and the request is served again without it. An expert whose domain the server
does not know (yet) is served to nobody by the gate; ``/health`` lists it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from experts.likelihood_routing import LikelihoodRouter
from experts.mixture import Mixture
from experts.records import ExpertRegistration
from experts.sampling import Sampling
from experts.serving import explain as _explain
from experts.serving import generation, health, routing, scoring
from experts.serving.decode_batch import DecodeBatch
from experts.serving.registry import ExpertRegistry, RegisterOutcome
from experts.serving.request import RequestError
from experts.serving.score_batcher import BatchedMixture, ScoreBatcher
from experts.store import ExpertStore
from experts.table import ExpertTable
from experts.trunk import Trunk
from router.gate import Gate, GateDecision
from router.table import DomainTable

__all__ = ["CPU_TOKENS_PER_CORE", "Batching", "ExpertServer", "RegisterOutcome", "RequestError"]


# A scoring forward of this many tokens per CPU core costs within ~10 % of the best cost
# per token (bundled trunk, one core: 128 us a token at 256, 119-124 at 512-1024, 256 at 16;
# two cores: 82 at 256, 68-73 at 512-2048): more only makes requests wait for company.
CPU_TOKENS_PER_CORE = 256


@dataclass(frozen=True)
class Batching:
    """How concurrent requests share forwards (``[serve]`` ``batch_window_ms``,
    ``batch_max_rows``, ``batch_forward_threads``, ``batch_max_tokens``; 0 threads: one
    per torch thread on a CPU trunk, 1 on a GPU; 0 tokens: ``CPU_TOKENS_PER_CORE`` per
    core of a forward on a CPU trunk, no limit on a GPU)."""

    window_s: float = 0.002
    max_rows: int = 16
    forward_threads: int = 0
    max_tokens: int = 0

    def threads(self, trunk: Trunk) -> int:
        """Scoring forwards at once."""
        if self.forward_threads:
            return self.forward_threads
        return torch.get_num_threads() if trunk.device.type == "cpu" else 1

    def tokens(self, trunk: Trunk) -> int:
        """Most padded tokens in one scoring forward (0: no limit)."""
        if self.max_tokens or trunk.device.type != "cpu":
            return self.max_tokens
        cores = max(1, torch.get_num_threads() // self.threads(trunk))
        return CPU_TOKENS_PER_CORE * cores

    def score_batcher(self, trunk: Trunk) -> ScoreBatcher:
        return ScoreBatcher(
            trunk,
            self.window_s,
            self.max_rows,
            self.threads(trunk),
            max_tokens=self.tokens(trunk),
        )


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
    batching : Batching, optional
        Share forwards between concurrent requests (window and most rows); None: every
        request runs its own forwards.
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
        batching: Batching | None = None,
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
        self.registry = ExpertRegistry(trunk, store, embedder)
        self.score_batcher = None if batching is None else batching.score_batcher(trunk)
        self.decoder = None if batching is None else DecodeBatch(trunk, batching.max_rows)
        if self.score_batcher is not None and trunk.device.type == "cpu":
            self.score_batcher.wide = self.decoder.call  # one OpenMP pool (decode_batch.py)
        self.refusals = self.registry.refusals
        self.requests = 0
        self.failed_requests = 0
        self.started = time.time()

    # ------------------------------------------------------------------ table
    @property
    def table(self) -> ExpertTable:
        """The current table (a request should read this once and keep it)."""
        return self.registry.table

    def rebuild_from_store(self) -> ExpertTable:
        """Start from every valid expert in the store (restart path); refusals are reported."""
        return self.registry.rebuild_from_store()

    def register(self, registration: ExpertRegistration) -> RegisterOutcome:
        """Verify and load the registered expert, then swap in a table that includes it.

        Never raises for a bad expert: the outcome says ``refused`` with the reason.
        """
        return self.registry.register(registration)

    def unregister(self, expert_id: str) -> RegisterOutcome:
        """Drop ``expert_id`` from the table (a tombstone on the topic); the store keeps it."""
        return self.registry.unregister(expert_id)

    # ------------------------------------------------------------------ requests
    def routing_request(self) -> contextlib.AbstractContextManager:
        """Around a request's routing and scoring: with batching, the scoring forward waits
        its window for company only while such requests are on their way."""
        if self.score_batcher is None:
            return contextlib.nullcontext()
        return self.score_batcher.caller()

    def mixture(self, table: ExpertTable) -> Mixture | BatchedMixture:
        """What scores rows under ``table``'s experts: a shared forward when batching."""
        if self.score_batcher is None:
            return Mixture(self.trunk, table)
        return BatchedMixture(self.score_batcher, table)

    def route(self, text: str, table: ExpertTable) -> GateDecision:
        """The gate's decision for ``text``: its domain and the experts of ``table`` it gets."""
        return routing.route(self, text, table)[0]

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
        ``domain`` picks the domain whose experts serve
        (:func:`experts.serving.routing.weights`). With ``explain``, the answer's
        ``explain`` says why (:meth:`explain`), with the perplexity of the trunk alone
        beside the mixture's (one forward of both rows). With ``top_logprobs`` (k >= 0),
        the answer adds ``pieces`` (each token's piece of the text, the first token
        included) and ``top_logprobs`` (per scored token, the k most likely tokens' pieces
        and log-probabilities).
        """
        return scoring.score(
            self, text, expert_weights, explain, domain=domain, top_logprobs=top_logprobs
        )

    def explain(self, text: str) -> dict[str, Any]:
        """Why ``text`` gets its domain and experts: the nearest domains (cosine, threshold),
        the rule that decided and why, the likelihood step if it ran, the experts and
        weights, and the perplexity with them and with the trunk alone."""
        return _explain.explain(self, text)

    def generate(
        self,
        text: str,
        max_new_tokens: int = 32,
        expert_weights: dict[str, float] | None = None,
        sampling: Sampling | None = None,
    ) -> dict[str, Any]:
        """Continuation of ``text`` under the mixture the gate picks: greedy, or drawn as
        ``sampling`` says (:mod:`experts.sampling`; the same seed gives the same text)."""
        return generation.generate(self, text, max_new_tokens, expert_weights, sampling)

    @property
    def max_new_bound(self) -> int:
        """The most tokens one request may generate (``max_new_tokens``, and one position
        left for the prompt)."""
        return min(self.max_new_tokens, self.max_tokens - 1)

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
        return generation.complete(
            self,
            text,
            max_new_tokens,
            expert_weights,
            sampling,
            domain=domain,
            top_logprobs=top_logprobs,
            stop=stop,
            on_text=on_text,
        )

    # ------------------------------------------------------------------ introspection
    def experts(self) -> list[dict[str, Any]]:
        return health.experts(self)

    def health(self) -> dict[str, Any]:
        return health.health(self)
