"""Scoring: per-token loss and perplexity of a text under the mixture, and the most likely
tokens of a step."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch

from experts.decoding import UNFINISHED, decode, pieces
from experts.mixture import Mixture
from experts.serving.request import RequestError, encode, with_table
from experts.serving.routing import weights as routed_weights
from experts.serving.score_batcher import experts_of
from experts.table import ExpertTable

if TYPE_CHECKING:
    from experts.serving import ExpertServer


def score(
    server: ExpertServer,
    text: str,
    expert_weights: dict[str, float] | None = None,
    explain: bool = False,
    *,
    domain: str | None = None,
    top_logprobs: int | None = None,
) -> dict[str, Any]:
    """:meth:`experts.serving.ExpertServer.score`."""
    trunk = server.trunk
    input_ids, cut = encode(trunk, text, server.max_tokens)
    if input_ids.shape[1] < 2:
        raise RequestError("'text' must be at least two tokens long to be scored")

    def work(table: ExpertTable) -> dict[str, Any]:
        with server.routing_request():
            weights, routing = routed_weights(server, text, table, expert_weights, explain, domain)
            rows = [weights, {}] if explain and weights else [weights]
            batch = input_ids.expand(len(rows), -1)  # (R, T)
            losses, logits = forward(server, table, batch, rows, bool(top_logprobs))
        token_losses = losses[0].tolist()
        mean = sum(token_losses) / len(token_losses)
        if explain:
            trunk_mean = float(losses[-1].mean())
            routing["explain"]["perplexity"] = {
                "with_experts": perplexity(mean),
                "trunk_alone": perplexity(trunk_mean),
                "tokens": len(token_losses) + 1,
            }
        tokens = trunk.tokenizer.convert_ids_to_tokens(input_ids[0].tolist())
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
            result["pieces"] = pieces(trunk.tokenizer, input_ids[0].tolist())
            if top_logprobs > 0:
                log_probs = torch.log_softmax(logits[0, :-1].float(), dim=-1)  # (T-1, V)
                top_k = [top(trunk.tokenizer, row, top_logprobs) for row in log_probs]
            else:  # no alternatives asked for: the logits are not even kept
                top_k = [{} for _ in token_losses]
            result["top_logprobs"] = top_k
        return result

    return with_table(server, work)


def forward(
    server: ExpertServer,
    table: ExpertTable,
    batch: torch.Tensor,
    rows: list[dict[str, float]],
    want_logits: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(R, T-1)`` losses of ``batch (R, T)`` under ``rows``' weights, and the ``(R, T, V)``
    logits with ``want_logits``: in a forward shared with other requests when the server
    batches (:class:`experts.serving.score_batcher.ScoreBatcher`), else alone."""
    if server.score_batcher is not None:
        return server.score_batcher.token_losses(batch, rows, experts_of(table, rows), want_logits)
    keep = range(len(rows)) if want_logits else ()
    with torch.no_grad():
        return Mixture(server.trunk, table).token_losses_chunked(batch, None, rows, keep)


def perplexity(mean_loss: float) -> float:
    return round(math.exp(min(mean_loss, 700.0)), 4)


def top(tokenizer: Any, log_probs: torch.Tensor, k: int) -> dict[str, float]:
    """The ``k`` most likely tokens of ``log_probs (V,)``, most likely first: each
    token's text alone, or its vocabulary entry where that text is not a whole
    character or another of the k has it (the keys stay one per token)."""
    if k <= 0:
        return {}
    values, ids = torch.topk(log_probs, min(k, log_probs.numel()))
    top: dict[str, float] = {}
    for token, value in zip(ids.tolist(), values.tolist(), strict=True):
        key = decode(tokenizer, [token])
        if UNFINISHED in key or key in top:
            key = str(tokenizer.convert_ids_to_tokens(token))
        if key in top:
            key = f"<token {token}>"
        top[key] = float(value)
    return top
