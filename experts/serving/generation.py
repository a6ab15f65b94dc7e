"""Generation: a continuation of a prompt under the mixture, all at once (``generate``) or
token by token with stop strings, log-probabilities and cancelling (``complete``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from experts.decoding import Continuation, pieces
from experts.mixture import Mixture
from experts.sampling import Sampling, sample, steps, stop_ids_of
from experts.serving.request import RequestError, encode, with_table
from experts.serving.routing import weights as routed_weights
from experts.serving.scoring import top
from experts.table import ExpertTable

if TYPE_CHECKING:
    from experts.serving import ExpertServer


def generate(
    server: ExpertServer,
    text: str,
    max_new_tokens: int = 32,
    expert_weights: dict[str, float] | None = None,
    sampling: Sampling | None = None,
) -> dict[str, Any]:
    """:meth:`experts.serving.ExpertServer.generate`."""
    input_ids, cut = prompt(server, text, max_new_tokens)
    tokenizer = server.trunk.tokenizer

    def work(table: ExpertTable) -> dict[str, Any]:
        weights, routing = routed_weights(server, text, table, expert_weights)
        mixture = Mixture(server.trunk, table)
        model = server.trunk.model
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

    return with_table(server, work)


def prompt(server: ExpertServer, text: str, max_new_tokens: int) -> tuple[torch.Tensor, bool]:
    bound = server.max_new_bound
    if not isinstance(max_new_tokens, int) or not 1 <= max_new_tokens <= bound:
        raise RequestError(f"'max_new_tokens' must be an int in [1, {bound}]")
    # the prompt's tail, so that prompt + continuation fit the trunk's positions
    return encode(server.trunk, text, server.max_tokens - max_new_tokens, keep_tail=True)


def complete(
    server: ExpertServer,
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
    """:meth:`experts.serving.ExpertServer.complete`."""
    input_ids, cut = prompt(server, text, max_new_tokens)
    tokenizer = server.trunk.tokenizer
    model = server.trunk.model
    end_ids = set(stop_ids_of(model))

    def work(table: ExpertTable) -> dict[str, Any]:
        weights, routing = routed_weights(server, text, table, expert_weights, domain=domain)
        continuation = Continuation(tokenizer, stop)
        scored: list[tuple[float, dict[str, float]]] = []  # per token: its, the top k
        finish = "length"
        with torch.no_grad(), Mixture(server.trunk, table).routing([weights]):
            for token, logits in steps(model, input_ids, max_new_tokens, sampling, end_ids):
                if top_logprobs is not None:
                    log_probs = torch.log_softmax(logits.float(), dim=-1)  # (V,)
                    scored.append(
                        (float(log_probs[token]), top(tokenizer, log_probs, top_logprobs))
                    )
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
            for piece, (logprob, best) in zip(pieces(tokenizer, ids), scored, strict=True):
                if at >= len(continuation.text) and continuation.stopped:
                    break  # the tokens of the stop string
                tokens.append({"text": piece, "logprob": logprob, "top": best})
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

    return with_table(server, work)
