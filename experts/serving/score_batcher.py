"""Scoring forwards shared by concurrent requests.

Each request submits its rows (token ids, per-row expert weights, and the experts those
weights name, resolved from the table the request read) and waits; one thread gathers what
is waiting into one right-padded forward of the mixture, each row with its own experts, and
hands every request its rows' losses (and logits where asked). Right padding leaves each
row's real positions as they are alone (attention is causal; positions count from 0), so a
row's numbers equal its forward alone within float tolerance.

The thread waits up to ``window_s`` for more rows only while other requests are on their
way (:meth:`ScoreBatcher.caller` counts them): one client alone never waits for company.
A forward that fails is re-run request by request, so one bad request fails only itself.
A forward holds at most ``max_tokens`` padded tokens: a CPU core's cost per token stops
falling past a few hundred, so larger forwards only make requests wait for company.

Several such threads may share the queue, each gathering and running its own forwards on
its share of the torch threads: on a CPU a forward's Python steps (module calls, masks)
run on one core while the others wait, and a second forward fills them (bundled trunk, 2 cores,
rows of one: 57.4 texts/s two at once on one thread each, 51.3 one at a time on two).
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import torch

from experts.expert import Expert
from experts.mixture import Mixture, Weights
from experts.trunk import Trunk

PAD_RATIO = 1.25


@dataclass
class _Submission:
    input_ids: torch.Tensor  # (R, T)
    weights: Weights  # R rows
    experts: Mapping[str, Expert]  # every id the weights name
    want_logits: bool
    done: threading.Event = field(default_factory=threading.Event)
    losses: torch.Tensor | None = None  # (R, T-1)
    logits: torch.Tensor | None = None  # (R, T, V)
    error: BaseException | None = None


class ScoreBatcher:
    """The threads that run the scoring forwards of every request on ``trunk``.

    Parameters
    ----------
    window_s : how long a forward waits for more rows after the first (while requests are
        on their way).
    max_rows : most rows in one forward (a submission is never split: one larger than this
        runs alone).
    max_tokens : most padded tokens (rows x the longest row) in one forward, 0: no limit (a
        submission larger than this runs alone): past a few hundred tokens a CPU core's
        cost per token no longer falls, so gathering more only makes requests wait.
    threads : forwards that run at once, each from its own thread.
    torch_threads : torch threads shared by the forwards (default: the caller's): a forward
        that holds every request in progress runs on all of them, else on its share
        (``torch_threads / threads``).
    """

    def __init__(
        self,
        trunk: Trunk,
        window_s: float = 0.002,
        max_rows: int = 16,
        threads: int = 1,
        torch_threads: int | None = None,
        max_tokens: int = 0,
    ) -> None:
        self.trunk = trunk
        self.window_s = float(window_s)
        self.max_rows = int(max_rows)
        self.max_tokens = int(max_tokens)
        self.threads = max(1, int(threads))
        self.torch_threads = torch_threads or torch.get_num_threads()  # shared by the forwards
        self.forwards = 0
        self._queue: queue.Queue[_Submission] = queue.Queue()
        self._callers = 0
        self._held = 0  # submissions taken from the queue and not answered yet
        self._running = 0  # forwards in progress
        self._lock = threading.Lock()
        self._started = False
        # runs a forward on all the torch threads on another thread (the decode batch's:
        # one OpenMP pool in the process; experts/serving/decode_batch.py); None: here
        self.wide: Callable[[Callable[[], None]], None] | None = None

    @contextlib.contextmanager
    def caller(self) -> Iterator[None]:
        """Mark a request on its way to :meth:`token_losses` (it may submit or not)."""
        with self._lock:
            self._callers += 1
        try:
            yield
        finally:
            with self._lock:
                self._callers -= 1

    def token_losses(
        self,
        input_ids: torch.Tensor,
        weights: Weights,
        experts: Mapping[str, Expert],
        want_logits: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(R, T-1)`` next-token losses of ``input_ids (R, T)`` under ``weights`` (and the
        ``(R, T, V)`` logits with ``want_logits``), from a forward shared with others."""
        if len(weights) != input_ids.shape[0]:
            raise ValueError(f"{len(weights)} weights for {input_ids.shape[0]} rows")
        submission = _Submission(input_ids, list(weights), experts, want_logits)
        self._start()
        self._queue.put(submission)
        submission.done.wait()
        if submission.error is not None:
            raise submission.error
        assert submission.losses is not None
        return submission.losses, submission.logits

    # ------------------------------------------------------------------ the thread
    def _start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
            for k in range(self.threads):
                name = "score-batcher" if self.threads == 1 else f"score-batcher-{k}"
                threading.Thread(target=self._run, name=name, daemon=True).start()

    def _run(self) -> None:
        while True:
            batch = [self._take(self._queue.get())]
            deadline = time.monotonic() + self.window_s
            while self._room(batch):
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    left = deadline - time.monotonic()
                    if left <= 0 or not self._others_coming():
                        break
                    try:
                        nxt = self._queue.get(timeout=left)
                    except queue.Empty:
                        break
                self._take(nxt)
                if self._fits(batch + [nxt]):
                    batch.append(nxt)
                else:
                    self._forward_or_each(batch)
                    batch = [nxt]
                    deadline = time.monotonic() + self.window_s
            self._forward_or_each(batch)

    def _fits(self, batch: list[_Submission]) -> bool:
        rows = sum(s.input_ids.shape[0] for s in batch)
        longest = max(s.input_ids.shape[1] for s in batch)
        return rows <= self.max_rows and (not self.max_tokens or rows * longest <= self.max_tokens)

    def _room(self, batch: list[_Submission]) -> bool:
        """Whether ``batch`` should wait for more: below this thread's share of rows, and
        one more row as long as its longest would still fit the token budget."""
        rows = sum(s.input_ids.shape[0] for s in batch)
        longest = max(s.input_ids.shape[1] for s in batch)
        tokens_left = not self.max_tokens or (rows + 1) * longest <= self.max_tokens
        return rows < self._share() and tokens_left

    def _take(self, submission: _Submission) -> _Submission:
        with self._lock:
            self._held += 1
        return submission

    def _share(self) -> int:
        """Rows one thread gathers: the requests in progress shared among the threads (at
        most ``max_rows``), so that concurrent forwards get even batches."""
        with self._lock:
            return min(self.max_rows, max(1, -(-self._callers // self.threads)))

    def _others_coming(self) -> bool:
        """Requests on their way that no thread holds yet (each thread's gathered rows
        and forwards in progress are held)."""
        with self._lock:
            return self._callers > self._held

    def _forward_or_each(self, batch: list[_Submission]) -> None:
        with self._lock:
            self._running += 1
            alone = self._running == 1 and self._callers <= len(batch)
        # a forward that holds every request in progress runs on all the torch threads;
        # while others run or wait, each gets its share (OpenMP's count is per thread)
        share = max(1, self.torch_threads // self.threads)
        handed = alone and self.wide is not None and self.torch_threads > share
        torch.set_num_threads(self.torch_threads if alone and not handed else share)
        try:
            if handed:
                self.wide(lambda: self._forward_groups(batch))
            else:
                self._forward_groups(batch)
        finally:
            with self._lock:
                self._held -= len(batch)
                self._running -= 1

    def _forward_groups(self, batch: list[_Submission]) -> None:
        for group in by_length(batch):
            self._forward_group(group)

    def _forward_group(self, batch: list[_Submission]) -> None:
        try:
            self._forward(batch)
        except Exception as exc:  # noqa: BLE001 - handed to the requests that caused it
            if len(batch) == 1:
                batch[0].error = exc
            else:
                for submission in batch:
                    self._forward_group([submission])
                return
        for submission in batch:
            submission.done.set()

    def _forward(self, batch: list[_Submission]) -> None:
        lengths = [s.input_ids.shape[1] for s in batch]
        longest = max(lengths)
        total = sum(s.input_ids.shape[0] for s in batch)
        device = self.trunk.device
        pad = self.trunk.tokenizer.pad_token_id or 0
        ids = torch.full((total, longest), pad, dtype=torch.long, device=device)  # (B, T)
        mask = torch.zeros((total, longest), dtype=torch.long, device=device)  # (B, T)
        weights: Weights = []
        experts: dict[str, Expert] = {}
        keep: list[int] = []  # the rows whose logits a request wants
        at = 0
        for submission, length in zip(batch, lengths, strict=True):
            n = submission.input_ids.shape[0]
            ids[at : at + n, :length] = submission.input_ids
            mask[at : at + n, :length] = 1
            weights.extend(submission.weights)
            experts.update(submission.experts)
            if submission.want_logits:
                keep.extend(range(at, at + n))
            at += n
        padded = min(lengths) < longest
        with torch.no_grad():
            losses, kept = Mixture(self.trunk, experts).token_losses_chunked(
                ids, mask if padded else None, weights, keep
            )  # (B, T-1), (k, T, V)
        self.forwards += 1
        at = kept_at = 0
        for submission, length in zip(batch, lengths, strict=True):
            n = submission.input_ids.shape[0]
            submission.losses = losses[at : at + n, : length - 1]
            if submission.want_logits:
                submission.logits = kept[kept_at : kept_at + n, :length]
                kept_at += n
            at += n


def by_length(batch: list[_Submission]) -> list[list[_Submission]]:
    """``batch`` in groups of similar length, shortest first: a group's longest text is at
    most ``PAD_RATIO`` times its shortest, so padding wastes little of a forward (on a CPU,
    scoring is compute-bound: a padded position costs what a real one does)."""
    groups: list[list[_Submission]] = []
    for submission in sorted(batch, key=lambda s: s.input_ids.shape[1]):
        length = submission.input_ids.shape[1]
        if groups and length <= PAD_RATIO * groups[-1][0].input_ids.shape[1]:
            groups[-1].append(submission)
        else:
            groups.append([submission])
    return groups


class BatchedMixture:
    """What the likelihood step needs of a :class:`Mixture` (``token_losses``), run through
    ``batcher`` with the experts of ``table``."""

    def __init__(self, batcher: ScoreBatcher, table: Mapping[str, Expert]) -> None:
        self.batcher = batcher
        self.table = table

    def token_losses(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, weights: Weights
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if attention_mask is not None:
            raise ValueError("the batched mixture pads rows itself: pass no attention mask")
        losses, _ = self.batcher.token_losses(input_ids, weights, experts_of(self.table, weights))
        return losses, torch.ones_like(losses)


def experts_of(table: Mapping[str, Expert], weights: Weights) -> dict[str, Expert]:
    """The experts ``weights`` name, loaded (and verified) from ``table`` now, in the
    request's thread: a refusal is the request's, before anything is submitted."""
    return {eid: table[eid] for row in weights for eid, w in row.items() if w != 0.0}
