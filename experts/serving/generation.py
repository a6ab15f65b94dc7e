"""Generation: a continuation of a prompt under the mixture, all at once (``generate``) or
token by token with stop strings, log-probabilities and cancelling (``complete``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from experts.mixture import Mixture
from experts.sampling import Sampling, sample, steps, stop_ids_of
from experts.serving.decoding_state import Decoding
from experts.serving.request import RequestError, encode, with_table
from experts.serving.routing import weights as routed_weights
from experts.serving.score_batcher import experts_of
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
        with server.routing_request():
            weights, routing = routed_weights(server, text, table, expert_weights)
        if server.decoder is not None:
            end_ids = set(stop_ids_of(server.trunk.model))
            decoding = Decoding(tokenizer, max_new_tokens, sampling, end_ids)
            server.decoder.run(input_ids, weights, experts_of(table, [weights]), decoding)
            new = decoding.continuation.ids
        else:
            mixture = Mixture(server.trunk, table)
            new = alone_generate(mixture, weights, input_ids, max_new_tokens, sampling)
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


def alone_generate(
    mixture: Mixture,
    weights: dict[str, float],
    input_ids: torch.Tensor,
    max_new_tokens: int,
    sampling: Sampling | None,
) -> list[int]:
    """The new token ids after ``input_ids (1, T)`` decoded by themselves (Hugging Face's
    ``generate`` when greedy; the path without batching)."""
    model = mixture.trunk.model
    with torch.no_grad(), mixture.routing([weights]):
        if sampling is None:
            out = model.generate(
                input_ids=input_ids,
                attention_mask=torch.ones_like(input_ids),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=mixture.trunk.tokenizer.pad_token_id,
            )
            return out[0, input_ids.shape[1] :].tolist()
        return sample(model, input_ids, max_new_tokens, sampling, stop_ids_of(model))


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
    """:meth:`experts.serving.ExpertServer.complete`: in the running batch
    (:class:`experts.serving.decode_batch.DecodeBatch`) when the server batches, else alone."""
    input_ids, cut = prompt(server, text, max_new_tokens)
    tokenizer = server.trunk.tokenizer
    end_ids = set(stop_ids_of(server.trunk.model))

    def work(table: ExpertTable) -> dict[str, Any]:
        with server.routing_request():
            weights, routing = routed_weights(server, text, table, expert_weights, domain=domain)
        decoding = Decoding(
            tokenizer, max_new_tokens, sampling, end_ids, stop, top_logprobs, on_text
        )
        if server.decoder is not None:
            server.decoder.run(input_ids, weights, experts_of(table, [weights]), decoding)
        else:
            alone(server, table, input_ids, weights, decoding)
        return {
            "experts": weights,
            **routing,
            "table_version": table.version,
            **decoding.result(),
            "prompt_tokens": int(input_ids.shape[1]),
            "sampling": None if sampling is None else sampling.to_dict(),
            "truncated": cut,
        }

    return with_table(server, work)


def alone(
    server: ExpertServer,
    table: ExpertTable,
    input_ids: torch.Tensor,
    weights: dict[str, float],
    decoding: Decoding,
) -> None:
    """Decode ``input_ids (1, T)`` by itself with its key/value cache (the path without
    batching): :func:`experts.sampling.steps` chooses each token as ``decoding`` would."""
    model = server.trunk.model
    budget = decoding.max_new_tokens
    with torch.no_grad(), Mixture(server.trunk, table).routing([weights]):
        for token, logits in steps(model, input_ids, budget, decoding.sampling):
            if decoding.take(token, logits):
                return
