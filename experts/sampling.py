"""Seeded sampling for ``/generate``: temperature, top-k and top-p (nucleus) beside greedy.

Greedy (temperature 0) stays the default and is Hugging Face's ``generate``. Sampling is
a plain decoding loop over the model with its key/value cache (:func:`steps`, which the
OpenAI-compatible routes also run greedily, taking the most likely token each step),
drawing every token from a ``torch.Generator`` of the request's own seed, on the CPU: the
same seed gives the same text whatever else the server runs at the same time (a global RNG
would be shared by every worker thread). Order per step: temperature, then top-k, then
top-p, as in Hugging Face.

Examples
--------
>>> parse_sampling({}) is None  # greedy
True
>>> parse_sampling({"temperature": 0.8, "top_k": 40, "seed": 7})
Sampling(temperature=0.8, top_p=1.0, top_k=40, seed=7)
>>> try:
...     parse_sampling({"top_k": 40})
... except SamplingError as exc:
...     print(exc)
'top_p', 'top_k' and 'seed' apply to sampling: give 'temperature' > 0 (0, the default, is greedy)
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import torch

MAX_TEMPERATURE = 10.0
MAX_TOP_K = 1_000_000
MAX_SEED = 2**63 - 1


class SamplingError(ValueError):
    """Sampling parameters that cannot be used (HTTP 400), with what to change."""


@dataclass(frozen=True)
class Sampling:
    temperature: float  # > 0
    top_p: float = 1.0  # in (0, 1]; 1: no nucleus cut
    top_k: int = 0  # 0: no top-k cut
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _number(body: dict[str, Any], name: str) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise SamplingError(f"'{name}' must be a finite number")
    return float(value)


def _integer(body: dict[str, Any], name: str, low: int, high: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise SamplingError(f"'{name}' must be an integer in [{low}, {high}]")
    return value


def parse_sampling(body: dict[str, Any]) -> Sampling | None:
    """The request's sampling (``temperature``, ``top_p``, ``top_k``, ``seed``), or None
    for greedy (no temperature, or 0). Without a seed, one is drawn (and answered).

    Raises:
        SamplingError: a value of the wrong type or out of range, or a sampling parameter
            without a temperature > 0.
    """
    temperature = _number(body, "temperature")
    top_p = _number(body, "top_p")
    top_k = _integer(body, "top_k", 0, MAX_TOP_K)
    seed = _integer(body, "seed", 0, MAX_SEED)
    if temperature is not None and not 0 <= temperature <= MAX_TEMPERATURE:
        raise SamplingError(f"'temperature' must be in [0, {MAX_TEMPERATURE:g}] (0 is greedy)")
    if top_p is not None and not 0 < top_p <= 1:
        raise SamplingError("'top_p' must be in (0, 1]")
    if not temperature:
        if (top_p, top_k, seed) != (None, None, None):
            raise SamplingError(
                "'top_p', 'top_k' and 'seed' apply to sampling: give 'temperature' > 0 "
                "(0, the default, is greedy)"
            )
        return None
    return Sampling(
        temperature=temperature,
        top_p=1.0 if top_p is None else top_p,
        top_k=top_k or 0,
        seed=secrets.randbelow(2**31) if seed is None else seed,
    )


def next_token(logits: torch.Tensor, sampling: Sampling, generator: torch.Generator) -> int:
    """One token id drawn from ``logits`` (shape ``(V,)``) as ``sampling`` says."""
    logits = logits.detach().float().cpu() / sampling.temperature
    if 0 < sampling.top_k < logits.numel():
        kept = torch.topk(logits, sampling.top_k).indices
        logits = torch.full_like(logits, -math.inf).index_fill(0, kept, 0.0) + logits
    if sampling.top_p < 1.0:
        ordered, order = torch.sort(logits, descending=True)
        probs = torch.softmax(ordered, dim=0)
        # the smallest head whose mass reaches top_p (the most likely token always stays)
        drop = probs.cumsum(0) - probs >= sampling.top_p
        ordered = ordered.masked_fill(drop, -math.inf)
        logits = torch.empty_like(logits).scatter(0, order, ordered)
    probs = torch.softmax(logits, dim=0)
    return int(torch.multinomial(probs, 1, generator=generator))


def choose(
    logits: torch.Tensor, sampling: Sampling | None, generator: torch.Generator | None
) -> int:
    """The next token of ``logits (V,)``: the most likely (``sampling`` None), else drawn
    with ``generator`` as ``sampling`` says."""
    if sampling is None:
        return int(logits.argmax())
    return next_token(logits, sampling, generator)


def generator_of(sampling: Sampling | None) -> torch.Generator | None:
    """The request's own generator, seeded with its seed (None for greedy)."""
    return None if sampling is None else torch.Generator().manual_seed(sampling.seed)


def steps(
    model: Any,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    sampling: Sampling | None,
    stop_ids: Iterable[int] = (),
) -> Iterator[tuple[int, torch.Tensor]]:
    """``(token id, its step's logits (V,))`` for up to ``max_new_tokens`` tokens after
    ``input_ids`` (shape ``(1, T)``), ending with (and including) the first of ``stop_ids``:
    the most likely token each step (``sampling`` None), else drawn as ``sampling`` says.
    Iterate under ``torch.no_grad()`` (and the mixture's routing)."""
    generator = generator_of(sampling)
    stop = set(stop_ids)
    past = None
    step_input = input_ids
    for _ in range(max_new_tokens):
        # the last position's logits only: the LM head over every prompt position was ~40 %
        # of a prefill of the bundled trunk
        out = model(input_ids=step_input, past_key_values=past, use_cache=True, logits_to_keep=1)
        past = out.past_key_values
        logits = out.logits[0, -1]
        token = choose(logits, sampling, generator)
        yield token, logits
        if token in stop:
            return
        step_input = torch.tensor([[token]], dtype=torch.long, device=input_ids.device)


def sample(
    model: Any,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    sampling: Sampling,
    stop_ids: Iterable[int] = (),
) -> list[int]:
    """Up to ``max_new_tokens`` token ids sampled after ``input_ids`` (shape ``(1, T)``),
    ending with (and including) the first of ``stop_ids``, as Hugging Face's generate
    does. Call under ``torch.no_grad()`` (and the mixture's routing)."""
    return [token for token, _ in steps(model, input_ids, max_new_tokens, sampling, stop_ids)]


def stop_ids_of(model: Any) -> list[int]:
    """The end-of-sequence ids greedy generation stops at (the model's generation config)."""
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        return []
    return [eos] if isinstance(eos, int) else list(eos)
