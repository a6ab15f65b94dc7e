"""Generation as one running batch (iteration-level, "continuous" batching).

One thread owns the batch. Between decode steps the waiting completions join: their
prompts run together in one left-padded forward (the prefill, each row with its own
experts) and their key/value caches are merged into the batch's; a finished or cancelled
one leaves at once, so one long generation never holds short ones back. Each step is one
forward of one new token per row, each row with its own experts (the mixture's per-row
weights) and its own sampling.

The batch's cache is *left*-padded: row ``b`` holds its ``n_b`` real positions at the right
end of ``L`` columns and a 0 in ``mask`` where it has none; positions are passed per row,
so a row's logits equal its decoding alone within float tolerance. Columns no row uses
any more are cut when rows leave.

Each completion keeps the experts it was routed to when it joined (resolved from the table
of its request), so a registration during a generation changes nothing in flight.

The thread also runs, between its steps, the other forwards that use every torch thread
(:meth:`DecodeBatch.call`): OpenMP keeps a pool of threads for each thread that ever ran a
region on several, and once the pools' threads outnumber the cores libgomp stops spinning
while it waits (``gomp_throttled_spin_count_var``): every decode step then sleeps and
wakes, ~25 % slower for the rest of the process's life (bundled trunk, 2 cores, 16 rows).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

from experts.expert import Expert
from experts.mixture import Mixture, Plan
from experts.serving.decoding_state import Decoding
from experts.trunk import Trunk

log = logging.getLogger(__name__)

KV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys, values (B, H, L, D)
ROOM = 64  # columns a batch's cache grows by at once (a step then writes, never copies)


class _GrowingLayer(DynamicLayer):
    """One layer's keys and values in buffers with room for ``ROOM`` more positions: a
    decode step writes its column in place (Hugging Face's own layer copies the whole cache
    every step, which was half of a step's time at 16 rows)."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        super().__init__()
        self.dtype, self.device = keys.dtype, keys.device
        self.is_initialized = True
        self.length = 0
        self._keys = self._values = keys[:, :, :0]
        self.update(keys, values)

    def update(self, key_states, value_states, *args, **kwargs):
        end = self.length + key_states.shape[-2]
        if end > self._keys.shape[-2]:
            shape = (*key_states.shape[:2], end + ROOM, key_states.shape[-1])
            keys, values = key_states.new_zeros(shape), value_states.new_zeros(shape)
            keys[:, :, : self.length] = self._keys[:, :, : self.length]
            values[:, :, : self.length] = self._values[:, :, : self.length]
            self._keys, self._values = keys, values
        self._keys[:, :, self.length : end] = key_states
        self._values[:, :, self.length : end] = value_states
        self.length = end
        self.keys, self.values = self._keys[:, :, :end], self._values[:, :, :end]
        return self.keys, self.values


class _BatchCache(DynamicCache):
    """The running batch's cache: one :class:`_GrowingLayer` per trunk layer."""

    def __init__(self, kv: KV) -> None:
        Cache.__init__(self, layers=[_GrowingLayer(k, v) for k, v in kv])

    def tensors(self) -> KV:
        return [(layer.keys, layer.values) for layer in self.layers]


@dataclass
class _Job:
    input_ids: torch.Tensor  # (1, T) the prompt
    weights: dict[str, float]
    experts: Mapping[str, Expert]
    decoding: Decoding
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


@dataclass
class _Call:
    fn: Callable[[], None]
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


_WAKE = object()  # put on the jobs' queue to wake a loop waiting for jobs: a call is waiting


@dataclass
class _Row:
    job: _Job
    position: int  # the position of the row's next token (= its real tokens so far)


class DecodeBatch:
    """The running generation batch of ``trunk``: at most ``max_rows`` completions."""

    def __init__(self, trunk: Trunk, max_rows: int = 16) -> None:
        self.trunk = trunk
        self.max_rows = int(max_rows)
        self.steps = 0
        self.cancelled = 0
        self.changed = threading.Condition()  # notified whenever rows leave
        self._waiting: queue.Queue[_Job | object] = queue.Queue()
        self._calls: queue.Queue[_Call] = queue.Queue()
        self._rows: list[_Row] = []
        self._cache: _BatchCache | None = None  # None: no rows
        self._mask: torch.Tensor | None = None  # (B, L) 1 where a row has a position
        # the rows' routing plan, kept while they stay (its stacks are built once): a plan
        # and its stacks were ~1.2 of a 8.5 ms step of 16 rows with ten experts
        self._plan: tuple[Mixture, Plan] | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.torch_threads = torch.get_num_threads()  # of the thread that made the batch

    @property
    def running(self) -> int:
        return len(self._rows)

    def run(
        self,
        input_ids: torch.Tensor,
        weights: dict[str, float],
        experts: Mapping[str, Expert],
        decoding: Decoding,
    ) -> None:
        """Decode ``input_ids (1, T)`` in the batch until ``decoding`` finishes (blocks)."""
        if input_ids.dim() != 2 or input_ids.shape[0] != 1 or input_ids.shape[1] < 1:
            # a row of a shared prefill with no token would have no logits of its own
            raise ValueError(
                f"a generation needs a (1, T >= 1) prompt, got {tuple(input_ids.shape)}"
            )
        job = _Job(input_ids, dict(weights), experts, decoding)
        self._start()
        self._waiting.put(job)
        job.done.wait()
        if job.error is not None:
            raise job.error

    def call(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the batch's thread, on its torch threads, between decode steps
        (blocks; ``fn``'s exception is raised here): every forward that uses all the torch
        threads runs on this one thread, so OpenMP keeps one pool (module docstring)."""
        call = _Call(fn)
        self._start()
        self._calls.put(call)
        self._waiting.put(_WAKE)
        call.done.wait()
        if call.error is not None:
            raise call.error

    # ------------------------------------------------------------------ the thread
    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="decode-batch", daemon=True)
                self._thread.start()

    def _loop(self) -> None:
        torch.set_num_threads(self.torch_threads)  # this thread's own (OpenMP's are per thread)
        while True:
            self._run_calls()
            jobs: list[_Job] = []
            while len(self._rows) + len(jobs) < self.max_rows:
                try:
                    job = self._waiting.get(block=not self._rows and not jobs)
                except queue.Empty:
                    break
                if job is _WAKE:
                    break  # a call waits: it runs before the next step
                jobs.append(job)
            if jobs:
                self._join(jobs)
            if self._rows:
                try:
                    self._step()
                except Exception as exc:  # noqa: BLE001 - every row of the step fails
                    log.exception("a decode step failed; its %d rows fail", len(self._rows))
                    for row in self._rows:
                        row.job.error = exc
                    self._leave(list(range(len(self._rows))))

    def _run_calls(self) -> None:
        while True:
            try:
                call = self._calls.get_nowait()
            except queue.Empty:
                return
            try:
                call.fn()
            except Exception as exc:  # noqa: BLE001 - raised in the caller's thread
                call.error = exc
            finally:
                call.done.set()

    def _join(self, jobs: list[_Job]) -> None:
        """Prefill the prompts of ``jobs`` together; each joins the batch unless its first
        token ends it. A prefill that fails is run again job by job, so one bad job fails
        only itself."""
        try:
            logits, kv, mask = self._prefill(jobs)  # (n, V), per layer (n, H, W, D), (n, W)
        except Exception as exc:  # noqa: BLE001 - the jobs' own failure
            if len(jobs) > 1:
                for job in jobs:
                    self._join([job])
                return
            jobs[0].error = exc
            jobs[0].done.set()
            return
        joining = []
        for i, job in enumerate(jobs):
            try:
                finished = job.decoding.step(logits[i])
            except Exception as exc:  # noqa: BLE001 - this job's own failure (its on_text)
                job.error, finished = exc, True
            if finished:
                job.done.set()
            else:
                joining.append(i)
        if joining:
            self._merge([jobs[i] for i in joining], kv, mask, joining)

    def _prefill(self, jobs: list[_Job]) -> tuple[torch.Tensor, KV, torch.Tensor]:
        """One forward of the prompts, left-padded to the longest (positions per row, as
        the batch's cache is laid out); the last position's logits only (the LM head over
        every prompt position was ~40 % of a prefill of the bundled trunk)."""
        device = self.trunk.device
        lengths = [job.input_ids.shape[1] for job in jobs]
        width = max(lengths)
        pad = self.trunk.tokenizer.pad_token_id or 0
        ids = torch.full((len(jobs), width), pad, dtype=torch.long, device=device)  # (n, W)
        mask = torch.zeros((len(jobs), width), dtype=torch.long, device=device)  # (n, W)
        for i, (job, length) in enumerate(zip(jobs, lengths, strict=True)):
            ids[i, width - length :] = job.input_ids[0]
            mask[i, width - length :] = 1
        padded = min(lengths) < width
        experts: dict[str, Expert] = {}
        for job in jobs:
            experts.update(job.experts)
        with torch.no_grad(), Mixture(self.trunk, experts).routing([j.weights for j in jobs]):
            out = self.trunk.model(
                input_ids=ids,
                attention_mask=mask if padded else None,
                position_ids=(mask.cumsum(1) - 1).clamp_min(0) if padded else None,
                use_cache=True,
                logits_to_keep=1,
            )
        kv = [(layer.keys, layer.values) for layer in out.past_key_values.layers]
        if padded:  # the padding's keys and values: zeros, as the batch's own padding
            empty = (mask == 0)[:, None, :, None]  # (n, 1, W, 1)
            kv = [(k.masked_fill(empty, 0.0), v.masked_fill(empty, 0.0)) for k, v in kv]
        return out.logits[:, -1], kv, mask

    def _merge(self, jobs: list[_Job], kv: KV, mask: torch.Tensor, rows: list[int]) -> None:
        """Rows ``rows`` of a prefill's ``kv`` and ``mask`` join the batch's cache."""
        if len(rows) < mask.shape[0]:
            index = torch.tensor(rows, device=self.trunk.device)
            kv = [(k.index_select(0, index), v.index_select(0, index)) for k, v in kv]
            mask = mask.index_select(0, index)
        if self._cache is None:
            self._cache, self._mask = _BatchCache(kv), mask
        else:
            width = max(self._mask.shape[1], mask.shape[1])
            self._cache = _BatchCache(
                [
                    (
                        torch.cat([_left_pad(k, width), _left_pad(nk, width)]),
                        torch.cat([_left_pad(v, width), _left_pad(nv, width)]),
                    )
                    for (k, v), (nk, nv) in zip(self._cache.tensors(), kv, strict=True)
                ]
            )
            self._mask = torch.cat([_left_pad(self._mask, width), _left_pad(mask, width)])
        self._rows.extend(_Row(job, job.input_ids.shape[1]) for job in jobs)
        self._plan = None

    def _step(self) -> None:
        rows = self._rows
        device = self.trunk.device
        tokens = torch.tensor([[r.job.decoding.last_token] for r in rows], device=device)  # (B,1)
        positions = torch.tensor([[r.position] for r in rows], device=device)  # (B, 1)
        mask = torch.cat([self._mask, torch.ones_like(self._mask[:, :1])], dim=1)  # (B, L+1)
        if self._plan is None:
            experts: dict[str, Expert] = {}
            for row in rows:
                experts.update(row.job.experts)
            mixture = Mixture(self.trunk, experts)
            weights = [r.job.weights for r in rows]
            self._plan = mixture, mixture.plan(weights, len(rows), device)
        mixture, plan = self._plan
        with torch.no_grad(), mixture.routing([r.job.weights for r in rows], plan=plan):
            logits = self.trunk.model(
                input_ids=tokens,
                attention_mask=mask,
                position_ids=positions,
                past_key_values=self._cache,
                use_cache=True,
            ).logits  # (B, 1, V)
        self._mask = mask
        self.steps += 1
        finished = []
        for b, row in enumerate(rows):
            row.position += 1
            try:
                if row.job.decoding.step(logits[b, -1]):
                    finished.append(b)
            except Exception as exc:  # noqa: BLE001 - this row's own failure (its on_text)
                row.job.error = exc
                finished.append(b)
        if finished:
            self._leave(finished)

    def _leave(self, finished: list[int]) -> None:
        """Rows ``finished`` leave the batch (their requests are answered); unused columns go."""
        jobs = [self._rows[b].job for b in finished]
        keep = [b for b in range(len(self._rows)) if b not in set(finished)]
        if keep:
            self._shrink(keep)
        else:
            self._cache, self._mask = None, None
        self._rows = [self._rows[b] for b in keep]
        self._plan = None
        self.cancelled += sum(job.decoding.finish == "cancelled" for job in jobs)
        with self.changed:
            self.changed.notify_all()
        for job in jobs:
            job.done.set()

    def _shrink(self, keep: list[int]) -> None:
        index = torch.tensor(keep, device=self.trunk.device)
        mask = self._mask.index_select(0, index)  # (B', L)
        used = mask.any(dim=0).nonzero()
        start = int(used[0]) if used.numel() else mask.shape[1]
        self._mask = mask[:, start:]
        self._cache = _BatchCache(
            [
                (k.index_select(0, index)[:, :, start:], v.index_select(0, index)[:, :, start:])
                for k, v in self._cache.tensors()
            ]
        )


def _left_pad(x: torch.Tensor, width: int) -> torch.Tensor:
    """``x`` with zero columns in front of its sequence dimension (the last but one of a
    ``(B, H, L, D)`` cache; the last of a ``(B, L)`` mask) up to ``width``."""
    dim = -2 if x.dim() == 4 else -1
    missing = width - x.shape[dim]
    if missing <= 0:
        return x
    shape = list(x.shape)
    shape[dim] = missing
    return torch.cat([x.new_zeros(shape), x], dim=dim)
