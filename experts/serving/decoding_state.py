"""One completion's state between decode steps, the same whether it decodes alone or as a
row of the running batch (:mod:`experts.serving.decode_batch`): the next token (greedy or
drawn with the request's own seeded generator), stop strings, end-of-text, the token
budget, log-probabilities and the client's ``on_text``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from experts.decoding import Continuation, pieces
from experts.sampling import Sampling, choose, generator_of
from experts.serving.scoring import top


class Decoding:
    """Feed it each step's logits with :meth:`step` (or a token chosen elsewhere with
    :meth:`take`); it says when the completion ended."""

    def __init__(
        self,
        tokenizer: Any,
        max_new_tokens: int,
        sampling: Sampling | None,
        end_ids: set[int],
        stop: Sequence[str] = (),
        top_logprobs: int | None = None,
        on_text: Callable[[str], bool] | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.sampling = sampling
        self.end_ids = end_ids
        self.top_logprobs = top_logprobs
        self.on_text = on_text
        self.continuation = Continuation(tokenizer, stop)
        self.generator = generator_of(sampling)
        self.scored: list[tuple[float, dict[str, float]]] = []  # per token: its, the top k
        self.finish: str | None = None  # None while it runs
        self.last_token: int | None = None

    def step(self, logits: torch.Tensor) -> bool:
        """Choose the next token from ``logits (V,)`` and take it; True when finished."""
        return self.take(choose(logits, self.sampling, self.generator), logits)

    def take(self, token: int, logits: torch.Tensor) -> bool:
        """Take ``token``, chosen from ``logits (V,)``; True when finished."""
        self.last_token = token
        if self.top_logprobs is not None:
            log_probs = torch.log_softmax(logits.float(), dim=-1)  # (V,)
            self.scored.append(
                (float(log_probs[token]), top(self.tokenizer, log_probs, self.top_logprobs))
            )
        shown = self.continuation.add(token)
        if shown and self.on_text is not None and self.on_text(shown) is False:
            self.finish = "cancelled"
        elif self.continuation.stopped or token in self.end_ids:
            self.finish = "stop"
        elif len(self.continuation.ids) >= self.max_new_tokens:
            self.finish = "length"
        return self.finish is not None

    def result(self) -> dict[str, Any]:
        """The answer's text, finish reason, new token count and per-token log-probabilities
        (None without ``top_logprobs``); the held-back text goes to ``on_text`` now."""
        finish = self.finish or "length"
        rest = self.continuation.rest()
        if rest and self.on_text is not None and finish != "cancelled":
            self.on_text(rest)
        ids = self.continuation.ids
        tokens = None
        if self.top_logprobs is not None:
            tokens, at = [], 0
            for piece, (logprob, best) in zip(
                pieces(self.tokenizer, ids), self.scored, strict=True
            ):
                if at >= len(self.continuation.text) and self.continuation.stopped:
                    break  # the tokens of the stop string
                tokens.append({"text": piece, "logprob": logprob, "top": best})
                at += len(piece)
        return {
            "text": self.continuation.text,
            "finish_reason": finish,
            "new_tokens": len(ids),
            "tokens": tokens,
        }
