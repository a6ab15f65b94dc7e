"""The OpenAI-compatible routes of the serving API, beside the others (which they leave
as they are):

* ``GET /v1/models``             ``auto``, each active domain (with its name), each expert
* ``POST /v1/completions``       ``{"model", "prompt", "max_tokens"?, "temperature"?,
  "top_p"?, "seed"?, "stop"?, "logprobs"?, "echo"?, "stream"?}``; ``max_tokens`` 0 with
  ``echo`` and ``logprobs`` scores the prompt itself (the numbers of ``/score``)
* ``POST /v1/chat/completions``  ``{"model", "messages", ...}``: the messages as one prompt
  (:func:`topology.serve.openai_format.chat_prompt`), the same sampling

``model`` picks the routing (:func:`topology.serve.openai_format.resolve_model`); an
unknown one is 404. ``stream: true`` answers server-sent events in OpenAI's chunks, ending
with ``data: [DONE]``. The routes sit behind the same middlewares as every route (Host
check, bearer token, path tricks), read their body under the same limits, and run on the
same bounded worker pool (503 with ``Retry-After`` when it is full); errors answer in
OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``. Only wiring lives
here: the wire format is :mod:`topology.serve.openai_format`, every token comes from
:class:`experts.serving.ExpertServer`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from topology.serve import openai_format as fmt
from worx.web import ERROR_SHAPES, HttpError, dumps, json_answer, read_json

if TYPE_CHECKING:
    from topology.serve.http_api import ServeAPI

log = logging.getLogger(__name__)
_END = object()  # the worker finished (or failed): no more text


class OpenAIRoutes:
    """The ``/v1`` routes over ``api``'s server, limits and worker pool."""

    def __init__(self, api: ServeAPI) -> None:
        self.api = api
        self.server = api.server

    def add_to(self, app: web.Application) -> None:
        app[ERROR_SHAPES] = {**app.get(ERROR_SHAPES, {}), "/v1/": fmt.error_body}
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat_completions)

    async def models(self, _request: web.Request) -> web.Response:
        manifests = list(self.server.table.manifests.values())
        rows = self.server.domains.rows()
        return json_answer(fmt.model_list(manifests, rows, self.server.started))

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await read_json(request, self.api.limits)
        req = fmt.completion_request(body, self.server.max_new_bound)
        route = self._route(req.model)
        if req.stream:
            return await self._stream(request, req, route, chat=False)
        answer_id, created = fmt.new_id("cmpl"), int(time.time())
        prompt_part = None
        if req.max_tokens == 0 or (req.echo and req.logprobs is not None):
            score = await self._score(req, route)
            if req.echo and req.logprobs is not None:
                prompt_part = fmt.prompt_logprobs(score)
        if req.max_tokens == 0:
            result = {**score, "text": "", "tokens": [], "finish_reason": "length"}
            counts = fmt.usage(len(score["token_losses"]) + 1, 0)
        else:
            result = await self._complete(req, route)
            counts = fmt.usage(result["prompt_tokens"], result["new_tokens"])
        logprobs = None
        if req.logprobs is not None:
            generated = fmt.completion_logprobs(result["tokens"], len(req.prompt))
            logprobs = fmt.joined_logprobs([prompt_part, generated])
        text = (req.prompt if req.echo else "") + result["text"]
        answer = fmt.completion(req, answer_id, created, text, fmt.finish_reason(result), logprobs)
        return json_answer({**answer, "usage": counts, "worx": fmt.routing(result)})

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        body = await read_json(request, self.api.limits)
        req = fmt.chat_request(body, self.server.max_new_bound)
        route = self._route(req.model)
        if req.stream:
            return await self._stream(request, req, route, chat=True)
        result = await self._complete(req, route)
        answer = fmt.chat(
            req,
            fmt.new_id("chatcmpl"),
            int(time.time()),
            result["text"],
            fmt.finish_reason(result),
            fmt.chat_logprobs(result["tokens"]),
        )
        counts = fmt.usage(result["prompt_tokens"], result["new_tokens"])
        return json_answer({**answer, "usage": counts, "worx": fmt.routing(result)})

    # ------------------------------------------------------------------ helpers
    def _route(self, model: Any) -> fmt.ModelRoute:
        table = self.server.table
        return fmt.resolve_model(model, table.manifests.keys(), self.server.domains.rows())

    async def _score(self, req: fmt.Request, route: fmt.ModelRoute) -> dict[str, Any]:
        text, cut = self.api.cut(req.prompt, keep_tail=False)
        result = await self.api.run(
            self.server.score, text, route.experts, domain=route.domain, top_logprobs=req.logprobs
        )
        return {**result, "truncated": result["truncated"] or cut}

    async def _complete(
        self, req: fmt.Request, route: fmt.ModelRoute, **options: Any
    ) -> dict[str, Any]:
        text, cut = self.api.cut(req.prompt, keep_tail=True)
        result = await self.api.run(
            self.server.complete,
            text,
            req.max_tokens,
            route.experts,
            req.sampling,
            domain=route.domain,
            top_logprobs=req.logprobs,
            stop=req.stop,
            **options,
        )
        return {**result, "truncated": result["truncated"] or cut}

    async def _stream(
        self, request: web.Request, req: fmt.Request, route: fmt.ModelRoute, chat: bool
    ) -> web.StreamResponse:
        """Server-sent events of the continuation as it is generated. The status is sent
        with the first text (or the end), so a refusal before it (busy, a bad request) is
        still a plain error answer."""
        if req.max_tokens == 0:
            raise fmt.OpenAIError(400, "'max_tokens' must be >= 1 with 'stream'", "max_tokens")
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        gone = threading.Event()  # the client left: the worker stops at its next token

        def on_text(text: str) -> bool:
            if gone.is_set():
                return False
            loop.call_soon_threadsafe(queue.put_nowait, text)
            return True

        task = asyncio.ensure_future(self._complete(req, route, on_text=on_text))
        task.add_done_callback(lambda _: queue.put_nowait(_END))
        task.add_done_callback(_retrieved)
        first = await queue.get()
        if first is _END:
            task.result()  # a refusal raises here, before any byte is sent
        answer_id = fmt.new_id("chatcmpl" if chat else "cmpl")
        created = int(time.time())

        def chunk(text: str | None, reason: str | None = None) -> dict[str, Any]:
            if chat:
                delta = {} if text is None else {"content": text}
                return fmt.chat_chunk(req, answer_id, created, delta, reason)
            return fmt.completion_chunk(req, answer_id, created, text or "", reason)

        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        try:
            await response.prepare(request)
            if chat:
                opening = fmt.chat_chunk(
                    req, answer_id, created, {"role": "assistant", "content": ""}, None
                )
                await _event(response, opening)
            elif req.echo:
                await _event(response, chunk(req.prompt))
            item = first
            while item is not _END:
                await _event(response, chunk(item))
                item = await queue.get()
            try:
                result = task.result()
            except HttpError as exc:
                await _event(response, fmt.error_body(exc.status, exc.reason, exc))
                return response
            except Exception as exc:  # noqa: BLE001 - the status is sent: an error event
                log.exception("%s %s failed while streaming", request.method, request.path)
                reason = "internal error; the server log has the details"
                await _event(response, fmt.error_body(500, reason, exc))
                return response
            last = chunk(None, fmt.finish_reason(result))
            await _event(response, last)
            if req.include_usage:
                counts = fmt.usage(result["prompt_tokens"], result["new_tokens"])
                await _event(response, fmt.usage_chunk(last, counts))
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        finally:
            gone.set()
        return response


async def _event(response: web.StreamResponse, body: dict[str, Any]) -> None:
    await response.write(b"data: " + dumps(body).encode() + b"\n\n")


def _retrieved(task: asyncio.Future) -> None:
    """Mark a worker's failure seen (the stream answered it, or its client left)."""
    if not task.cancelled():
        task.exception()
