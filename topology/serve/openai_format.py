"""The OpenAI wire format of the ``/v1`` routes: requests in, answers out, no I/O.

(~490 lines of pure functions for three routes that share their field checks and answer
shapes; split by route, those would be written three times.)

What a request's ``model`` means (:func:`resolve_model`, listed by :func:`model_list`):
``auto`` routes by the gate, as ``/score`` does; an expert id pins that expert; a domain
id or a domain's name serves with that domain's experts (the gate's weights among them;
a domain without experts is the trunk alone). The chat routes turn ``messages`` into one
prompt for a base trunk (:func:`chat_prompt`)::

    System: <system message>
    User: <user message>
    Assistant: <earlier answer>
    User: <user message>
    Assistant:

and stop where the trunk starts the next turn (:data:`CHAT_STOP`).

Sampling is OpenAI's: ``temperature`` 1 unless given, 0 the most likely token each step,
``top_p`` and ``seed`` (and ``top_k``, beyond OpenAI's parameters) as in
:mod:`experts.sampling`. ``max_tokens`` above the server's bound (``experts.max_new_tokens``)
is cut to it, and the answer ends with ``finish_reason`` ``length``; without one, a
completion gets 16 tokens (OpenAI's default) and a chat answer the bound.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from experts.sampling import Sampling, SamplingError, parse_sampling
from router.explain import domain_name
from worx.web import HttpError

AUTO = "auto"
OWNER = "worx"
MAX_LOGPROBS = 20  # top tokens per position one request may ask for
MAX_STOP = 4  # stop strings per request, as OpenAI allows
MAX_STOP_CHARS = 200
DEFAULT_MAX_TOKENS = 16  # OpenAI's default for completions
CHAT_ROLES = {"system": "System", "developer": "System", "user": "User", "assistant": "Assistant"}
CHAT_STOP = ("\nUser:", "\nSystem:")
_TYPES = {401: "authentication_error", 500: "server_error", 503: "server_error"}
_CODES = {
    401: "invalid_api_key",
    404: "not_found",
    405: "method_not_allowed",
    408: "timeout",
    413: "request_too_large",
    421: "misdirected_request",
    500: "internal_error",
    503: "overloaded",
}


class OpenAIError(HttpError):
    """An :class:`HttpError` that names the request's field (``param``) and a ``code``."""

    def __init__(self, status: int, reason: str, param: str | None = None, code: str = "") -> None:
        super().__init__(status, reason)
        self.param = param
        self.code = code


def error_body(status: int, reason: str, exc: BaseException) -> dict[str, Any]:
    """OpenAI's error shape: ``{"error": {"message", "type", "param", "code"}}``."""
    return {
        "error": {
            "message": reason,
            "type": _TYPES.get(status, "invalid_request_error"),
            "param": getattr(exc, "param", None),
            "code": getattr(exc, "code", "") or _CODES.get(status, "invalid_request"),
        }
    }


# ---------------------------------------------------------------------- models
@dataclass(frozen=True)
class ModelRoute:
    """How a ``model`` is served: ``experts`` pinned, ``domain``'s experts, or the gate."""

    model: str
    experts: dict[str, float] | None = None
    domain: str | None = None


def _domains(rows: Iterable[Any]) -> list[Any]:
    return sorted((r for r in rows if r.status == "active"), key=lambda r: r.domain_id)


def model_list(manifests: Sequence[Any], rows: Iterable[Any], started: float) -> dict[str, Any]:
    """``GET /v1/models``: ``auto``, each active domain, each registered expert."""
    domains = _domains(rows)
    names = {r.domain_id: domain_name(r) for r in domains}
    data = [
        {
            "id": AUTO,
            "object": "model",
            "created": int(started),
            "owned_by": OWNER,
            "kind": "auto",
        }
    ]
    for row in domains:
        data.append(
            {
                "id": row.domain_id,
                "object": "model",
                "created": row.created_ms // 1000,
                "owned_by": OWNER,
                "kind": "domain",
                "domain_name": names[row.domain_id],
                "experts": sorted(m.expert_id for m in manifests if m.domain_id == row.domain_id),
            }
        )
    for manifest in sorted(manifests, key=lambda m: m.expert_id):
        data.append(
            {
                "id": manifest.expert_id,
                "object": "model",
                "created": manifest.created_ms // 1000,
                "owned_by": OWNER,
                "kind": "expert",
                "domain": manifest.domain_id,
                "domain_name": names.get(manifest.domain_id),
            }
        )
    return {"object": "list", "data": data}


def resolve_model(model: Any, expert_ids: Iterable[str], rows: Iterable[Any]) -> ModelRoute:
    """The routing ``model`` names: ``auto``, an expert id, a domain id, a domain name
    (in that order). Raises :class:`OpenAIError` 404 for any other."""
    if not isinstance(model, str) or not model:
        raise OpenAIError(400, "'model' must be a model id; GET /v1/models lists them", "model")
    if model == AUTO:
        return ModelRoute(model)
    if model in set(expert_ids):
        return ModelRoute(model, experts={model: 1.0})
    domains = _domains(rows)
    if any(r.domain_id == model for r in domains):
        return ModelRoute(model, domain=model)
    named = [r.domain_id for r in domains if domain_name(r) == model]
    if len(named) == 1:
        return ModelRoute(model, domain=named[0])
    if named:
        raise OpenAIError(
            400, f"several domains are named {model[:64]!r}: give a domain id", "model"
        )
    raise OpenAIError(
        404,
        f"the model {model[:64]!r} does not exist; GET /v1/models lists them",
        "model",
        "model_not_found",
    )


# ---------------------------------------------------------------------- requests
@dataclass(frozen=True)
class Request:
    """A completion or chat request, checked."""

    model: str
    prompt: str
    max_tokens: int  # already cut to the server's bound
    sampling: Sampling | None
    stop: tuple[str, ...]
    logprobs: int | None  # top tokens per position; None: no logprobs
    echo: bool
    stream: bool
    include_usage: bool


def _bool(body: dict[str, Any], name: str, default: bool = False) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise OpenAIError(400, f"'{name}' must be true or false", name)
    return value


def _int(body: dict[str, Any], name: str, low: int, high: int | None = None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise OpenAIError(400, f"'{name}' must be an integer >= {low}", name)
    if high is not None and value > high:
        raise OpenAIError(400, f"'{name}' must be an integer in [{low}, {high}]", name)
    return value


def _refuse_unsupported(body: dict[str, Any]) -> None:
    for name in ("n", "best_of"):
        if body.get(name) not in (None, 1):
            raise OpenAIError(
                400, f"'{name}' must be 1: this server answers one choice per request", name
            )
    for name in ("presence_penalty", "frequency_penalty"):
        value = body.get(name)
        if value is not None and value != 0:
            raise OpenAIError(400, f"'{name}' is not supported (give 0 or leave it out)", name)
    if body.get("logit_bias") not in (None, {}):
        raise OpenAIError(400, "'logit_bias' is not supported", "logit_bias")
    if body.get("suffix") is not None:
        raise OpenAIError(400, "'suffix' is not supported", "suffix")
    if body.get("tools") not in (None, []) or body.get("functions") not in (None, []):
        raise OpenAIError(400, "tools and functions are not supported", "tools")


def _sampling(body: dict[str, Any]) -> Sampling | None:
    given = {
        k: body[k] for k in ("temperature", "top_p", "top_k", "seed") if body.get(k) is not None
    }
    temperature = given.setdefault("temperature", 1.0)
    try:
        if isinstance(temperature, int | float) and not isinstance(temperature, bool):
            if temperature == 0:  # the most likely token: top_p and seed are checked, unused
                parse_sampling({**given, "temperature": 1.0})
                return None
        return parse_sampling(given)
    except SamplingError as exc:
        param = next((k for k in given if f"'{k}'" in str(exc)), None)
        raise OpenAIError(400, str(exc), param) from None


def _stop(body: dict[str, Any], extra: Sequence[str] = ()) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        stop = []
    elif isinstance(stop, str):
        stop = [stop]
    if (
        not isinstance(stop, list)
        or len(stop) > MAX_STOP
        or not all(isinstance(s, str) and len(s) <= MAX_STOP_CHARS for s in stop)
    ):
        raise OpenAIError(
            400,
            f"'stop' must be a string or a list of at most {MAX_STOP} strings "
            f"of at most {MAX_STOP_CHARS} characters",
            "stop",
        )
    return tuple(dict.fromkeys(s for s in (*stop, *extra) if s))


def _max_tokens(
    body: dict[str, Any], names: Sequence[str], bound: int, low: int, default: int
) -> int:
    for name in names:
        value = _int(body, name, low)
        if value is not None:
            return min(value, bound)
    return min(default, bound)


def _stream(body: dict[str, Any]) -> tuple[bool, bool]:
    stream = _bool(body, "stream")
    options = body.get("stream_options")
    if options is None:
        return stream, False
    if not isinstance(options, dict):
        raise OpenAIError(400, "'stream_options' must be an object", "stream_options")
    return stream, _bool(options, "include_usage")


def completion_request(body: dict[str, Any], bound: int) -> Request:
    """``POST /v1/completions``'s body, checked; ``bound``: the most tokens to generate."""
    _refuse_unsupported(body)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str) or not prompt:
        raise OpenAIError(
            400, "'prompt' must be a non-empty string (or a list of one; not token ids)", "prompt"
        )
    stream, include_usage = _stream(body)
    logprobs = _int(body, "logprobs", 0, MAX_LOGPROBS)
    if stream and logprobs is not None:
        raise OpenAIError(400, "'logprobs' with 'stream' is not supported", "logprobs")
    return Request(
        model=body.get("model"),  # type: ignore[arg-type] # resolve_model checks it
        prompt=prompt,
        max_tokens=_max_tokens(body, ("max_tokens",), bound, 0, DEFAULT_MAX_TOKENS),
        sampling=_sampling(body),
        stop=_stop(body),
        logprobs=logprobs,
        echo=_bool(body, "echo"),
        stream=stream,
        include_usage=include_usage,
    )


def chat_request(body: dict[str, Any], bound: int) -> Request:
    """``POST /v1/chat/completions``'s body, checked (the messages as :func:`chat_prompt`)."""
    _refuse_unsupported(body)
    stream, include_usage = _stream(body)
    logprobs = None
    if _bool(body, "logprobs"):
        logprobs = _int(body, "top_logprobs", 0, MAX_LOGPROBS) or 0
        if stream:
            raise OpenAIError(400, "'logprobs' with 'stream' is not supported", "logprobs")
    elif body.get("top_logprobs") is not None:
        raise OpenAIError(400, "'top_logprobs' needs 'logprobs': true", "top_logprobs")
    return Request(
        model=body.get("model"),  # type: ignore[arg-type]
        prompt=chat_prompt(body.get("messages")),
        max_tokens=_max_tokens(body, ("max_completion_tokens", "max_tokens"), bound, 1, bound),
        sampling=_sampling(body),
        stop=_stop(body, CHAT_STOP),
        logprobs=logprobs,
        echo=False,
        stream=stream,
        include_usage=include_usage,
    )


def chat_prompt(messages: Any) -> str:
    """The prompt of a chat: one ``Role: content`` line per message, then ``Assistant:``.

    >>> chat_prompt([{"role": "system", "content": "Be brief."},
    ...              {"role": "user", "content": "Hello"}])
    'System: Be brief.\\nUser: Hello\\nAssistant:'
    """
    if not isinstance(messages, list) or not messages:
        raise OpenAIError(400, "'messages' must be a non-empty list of messages", "messages")
    lines = []
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in CHAT_ROLES:
            raise OpenAIError(
                400,
                f"messages[{i}]: 'role' must be one of {sorted(CHAT_ROLES)}",
                f"messages[{i}].role",
            )
        lines.append(f"{CHAT_ROLES[role]}: {_content(message.get('content'), i)}")
    return "\n".join(lines) + "\nAssistant:"


def _content(content: Any, i: int) -> str:
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        for p in content
    ):
        return "".join(p["text"] for p in content)
    raise OpenAIError(
        400,
        f"messages[{i}]: 'content' must be a string or a list of text parts",
        f"messages[{i}].content",
    )


# ---------------------------------------------------------------------- answers
def new_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(12)}"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def routing(result: dict[str, Any]) -> dict[str, Any]:
    """What the answer says about the routing (beyond OpenAI's fields: ``worx``)."""
    keys = ("experts", "routed_by", "domain", "table_version", "truncated")
    return {k: result[k] for k in keys if k in result}


def prompt_logprobs(score: dict[str, Any]) -> dict[str, list]:
    """The legacy ``logprobs`` block of a prompt scored by ``ExpertServer.score`` (with
    ``top_logprobs``): the first token has no log-probability (nothing precedes it)."""
    pieces = score["pieces"]
    return {
        "tokens": pieces,
        "token_logprobs": [None] + [-loss for loss in score["token_losses"]],
        "top_logprobs": [None] + score["top_logprobs"],
        "text_offset": _offsets(pieces, 0),
    }


def completion_logprobs(tokens: list[dict[str, Any]], start: int) -> dict[str, list]:
    """The legacy ``logprobs`` block of generated ``tokens``, offsets from ``start``."""
    pieces = [t["text"] for t in tokens]
    return {
        "tokens": pieces,
        "token_logprobs": [t["logprob"] for t in tokens],
        "top_logprobs": [t["top"] for t in tokens],
        "text_offset": _offsets(pieces, start),
    }


def joined_logprobs(parts: Sequence[dict[str, list] | None]) -> dict[str, list] | None:
    blocks = [p for p in parts if p is not None]
    if not blocks:
        return None
    return {k: [v for b in blocks for v in b[k]] for k in blocks[0]}


def _offsets(pieces: Sequence[str], start: int) -> list[int]:
    offsets, at = [], start
    for piece in pieces:
        offsets.append(at)
        at += len(piece)
    return offsets


def chat_logprobs(tokens: list[dict[str, Any]] | None) -> dict[str, Any] | None:
    """The chat ``logprobs`` block (``content``: token, logprob, bytes, top_logprobs)."""
    if tokens is None:
        return None

    def entry(token: str, logprob: float) -> dict[str, Any]:
        return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8"))}

    return {
        "content": [
            {
                **entry(t["text"], t["logprob"]),
                "top_logprobs": [entry(k, v) for k, v in t["top"].items()],
            }
            for t in tokens
        ]
    }


def finish_reason(result: dict[str, Any]) -> str:
    return "stop" if result["finish_reason"] == "stop" else "length"


def completion(
    request: Request, answer_id: str, created: int, text: str, reason: str, logprobs: Any
) -> dict[str, Any]:
    return {
        "id": answer_id,
        "object": "text_completion",
        "created": created,
        "model": request.model,
        "choices": [{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": reason}],
    }


def chat(
    request: Request, answer_id: str, created: int, text: str, reason: str, logprobs: Any
) -> dict[str, Any]:
    return {
        "id": answer_id,
        "object": "chat.completion",
        "created": created,
        "model": request.model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": logprobs,
                "finish_reason": reason,
            }
        ],
    }


def completion_chunk(
    request: Request, answer_id: str, created: int, text: str, reason: str | None
) -> dict[str, Any]:
    return completion(request, answer_id, created, text, reason, None)  # type: ignore[arg-type]


def chat_chunk(
    request: Request, answer_id: str, created: int, delta: dict[str, Any], reason: str | None
) -> dict[str, Any]:
    return {
        "id": answer_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": request.model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}],
    }


def usage_chunk(chunk: dict[str, Any], counts: dict[str, int]) -> dict[str, Any]:
    """The last chunk of a stream with ``include_usage``: no choices, the usage."""
    return {**chunk, "choices": [], "usage": counts}
