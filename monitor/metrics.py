"""Forgetting and transfer metrics: pure functions on a loss matrix.

The matrix ``L`` has one row per step and one column per domain: ``L[i, j]`` is the mean
held-out loss (nats/token) of domain ``j`` under the serving model after the ``i``-th
expert registration (row 0 = trunk alone). Lower is better. A missing entry (the domain's
held-out set did not exist yet, or was not evaluated) is ``NaN`` (``None`` on input).

``arrivals[j]`` is the step at which domain ``j``'s own expert arrived (the first one, if it
got several), or ``None`` for a domain never given an expert.

Definitions (also in docs/monitor.md):

- forgetting ``f[i, j] = L[i, j] - min_{k < i} L[k, j]`` (Chaudhry et al. 2018, with loss):
  the rise of the loss above the best value it had at any earlier step; undefined for
  a domain with no earlier value. Averages and maxima run over the *learned* domains
  (own expert arrived at a step ``< i``), as in Chaudhry's ``F_k`` over tasks ``j < k``.
- relative perplexity change ``exp(f[i, j]) - 1`` (perplexity = ``exp(loss)``).
- backward transfer ``BWT_i = mean_j (L[a_j, j] - L[i, j])`` over domains whose expert
  arrived at ``a_j < i`` (GEM, Lopez-Paz & Ranzato 2017, with loss; ``>= 0`` = nothing lost).
- forward transfer ``FWT_j = L[0, j] - L[a_j - 1, j]``: how much the experts that arrived
  before domain ``j``'s own improved it over the trunk alone (``> 0`` = helped).

Examples
--------
>>> L = [[3.0, 3.0], [2.0, 3.5], [2.5, 1.0]]
>>> forgetting_row(L, 2)
[0.5, -2.0]
>>> summarise(L, arrivals=[1, 2], step=2)["forgetting_avg"]
0.5
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

MatrixLike = Sequence[Sequence[float | None]] | np.ndarray


def as_matrix(loss: MatrixLike) -> np.ndarray:
    """Return ``loss`` as a float array ``(steps, domains)`` with ``NaN`` for missing entries.

    Raises
    ------
    ValueError
        Rows of different lengths, a non-2-D input, or a negative / infinite loss.
    """
    if isinstance(loss, np.ndarray) and loss.dtype == np.float64 and loss.ndim == 2:
        matrix = loss  # already one (NaN for missing): checked, not copied
    else:
        matrix = _to_matrix(loss)
    finite = matrix[~np.isnan(matrix)]
    if np.any(np.isinf(finite)) or np.any(finite < 0):
        raise ValueError("losses must be finite and >= 0 (nats/token)")
    return matrix


def _to_matrix(loss: MatrixLike) -> np.ndarray:
    rows = [list(r) for r in loss]
    if rows and len({len(r) for r in rows}) != 1:
        raise ValueError("loss matrix rows have different lengths; pad missing entries with None")
    matrix = np.array(
        [[math.nan if v is None else float(v) for v in r] for r in rows], dtype=np.float64
    ).reshape(len(rows), len(rows[0]) if rows else 0)  # (steps, domains)
    return matrix


def _opt(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def _check_step(matrix: np.ndarray, step: int) -> None:
    if not 0 <= step < matrix.shape[0]:
        raise ValueError(f"step {step} is outside the matrix (0..{matrix.shape[0] - 1})")


def _check_arrivals(matrix: np.ndarray, arrivals: Sequence[int | None]) -> None:
    if len(arrivals) != matrix.shape[1]:
        raise ValueError(f"{len(arrivals)} arrivals for {matrix.shape[1]} domains")
    for a in arrivals:
        if a is not None and not 1 <= a < matrix.shape[0]:
            raise ValueError(
                f"arrival step {a} must be in 1..{matrix.shape[0] - 1} (0 is the trunk)"
            )


def forgetting_row(loss: MatrixLike, step: int) -> list[float | None]:
    """Per-domain forgetting after ``step``: ``L[step, j] - min_{k<step} L[k, j]``.

    ``None`` where the domain has no value at ``step`` or none before it (a domain seen
    only once, and every domain at step 0).
    """
    matrix = as_matrix(loss)
    _check_step(matrix, step)
    out: list[float | None] = []
    for j in range(matrix.shape[1]):
        earlier = matrix[:step, j]  # (step,)
        earlier = earlier[~np.isnan(earlier)]
        now = matrix[step, j]
        out.append(None if earlier.size == 0 or math.isnan(now) else float(now - earlier.min()))
    return out


def relative_ppl_change_row(loss: MatrixLike, step: int) -> list[float | None]:
    """Per-domain relative perplexity rise over the best earlier perplexity: ``exp(f) - 1``."""
    return [None if f is None else math.expm1(f) for f in forgetting_row(loss, step)]


def learned_domains(arrivals: Sequence[int | None], step: int) -> list[int]:
    """Indices of domains whose own expert arrived strictly before ``step``."""
    return [j for j, a in enumerate(arrivals) if a is not None and a < step]


def backward_transfer(loss: MatrixLike, arrivals: Sequence[int | None], step: int) -> float | None:
    """GEM backward transfer with loss at ``step``: mean of ``L[a_j, j] - L[step, j]``.

    Over domains whose expert arrived at ``a_j < step`` with both values present. ``None``
    when no domain qualifies (e.g. at step 0 or 1). ``>= 0`` means nothing was forgotten.
    """
    matrix = as_matrix(loss)
    _check_step(matrix, step)
    _check_arrivals(matrix, arrivals)
    diffs = [
        matrix[arrivals[j], j] - matrix[step, j]  # type: ignore[index]
        for j in learned_domains(arrivals, step)
    ]
    diffs = [d for d in diffs if not math.isnan(d)]
    return float(np.mean(diffs)) if diffs else None


def forward_transfer(loss: MatrixLike, arrivals: Sequence[int | None]) -> list[float | None]:
    """Per-domain forward transfer ``L[0, j] - L[a_j - 1, j]`` (``> 0``: earlier experts helped).

    ``None`` for a domain never given an expert, or with no trunk-alone value (its held-out
    set appeared after step 0 and was not back-filled). A domain whose expert was the first
    to arrive (``a_j = 1``) gets exactly 0.
    """
    matrix = as_matrix(loss)
    _check_arrivals(matrix, arrivals)
    out: list[float | None] = []
    for j, a in enumerate(arrivals):
        out.append(None if a is None else _opt(matrix[0, j] - matrix[a - 1, j]))
    return out


def transfer_to_unlearned(
    loss: MatrixLike, arrivals: Sequence[int | None], step: int
) -> list[float | None]:
    """For domains never given an expert: ``L[0, j] - L[step, j]`` (what the others did to it)."""
    matrix = as_matrix(loss)
    _check_step(matrix, step)
    _check_arrivals(matrix, arrivals)
    return [
        _opt(matrix[0, j] - matrix[step, j]) if a is None else None for j, a in enumerate(arrivals)
    ]


@dataclass(frozen=True)
class StepSummary:
    """Every metric of one step, JSON-able (``None`` = undefined at this step)."""

    step: int
    forgetting: list[float | None]  # per domain, all domains with an earlier value
    relative_ppl_change: list[float | None]
    forgetting_avg: float | None  # over learned domains (Chaudhry's F)
    forgetting_max: float | None
    relative_ppl_change_avg: float | None
    relative_ppl_change_max: float | None
    forgetting_all_avg: float | None  # over every domain with a value (learned or not)
    backward_transfer: float | None
    forward_transfer: list[float | None]
    forward_transfer_avg: float | None  # over domains whose expert arrived at step >= 2
    transfer_to_unlearned: list[float | None]

    def to_dict(self) -> dict:
        return asdict(self)


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def summarise(loss: MatrixLike, arrivals: Sequence[int | None], step: int | None = None) -> dict:
    """All metrics of ``step`` (default: the last row) as a dict (see :class:`StepSummary`)."""
    matrix = as_matrix(loss)
    if matrix.shape[0] == 0:
        raise ValueError("the loss matrix has no rows yet (evaluate the trunk alone first)")
    step = matrix.shape[0] - 1 if step is None else step
    _check_step(matrix, step)
    _check_arrivals(matrix, arrivals)
    forgetting = forgetting_row(matrix, step)
    rel = relative_ppl_change_row(matrix, step)
    learned = learned_domains(arrivals, step)
    f_learned = [forgetting[j] for j in learned if forgetting[j] is not None]
    r_learned = [rel[j] for j in learned if rel[j] is not None]
    fwt = forward_transfer(matrix, arrivals)
    fwt_counted = [
        v for v, a in zip(fwt, arrivals, strict=True) if v is not None and a is not None and a >= 2
    ]
    return StepSummary(
        step=step,
        forgetting=forgetting,
        relative_ppl_change=rel,
        forgetting_avg=_mean(f_learned),  # type: ignore[arg-type]
        forgetting_max=max(f_learned) if f_learned else None,  # type: ignore[type-var]
        relative_ppl_change_avg=_mean(r_learned),  # type: ignore[arg-type]
        relative_ppl_change_max=max(r_learned) if r_learned else None,  # type: ignore[type-var]
        forgetting_all_avg=_mean([f for f in forgetting if f is not None]),
        backward_transfer=backward_transfer(matrix, arrivals, step),
        forward_transfer=fwt,
        forward_transfer_avg=_mean(fwt_counted),
        transfer_to_unlearned=transfer_to_unlearned(matrix, arrivals, step),
    ).to_dict()


def summarise_all(loss: MatrixLike, arrivals: Sequence[int | None]) -> list[dict]:
    """:func:`summarise` for every step, in order (the forgetting-over-time curve)."""
    matrix = as_matrix(loss)
    return [summarise(matrix, arrivals, i) for i in range(matrix.shape[0])]


def routing_change(
    before: dict[str, dict[str, float]],
    after: dict[str, dict[str, float]],
    loss_before: dict[str, float],
    loss_after: dict[str, float],
    tol: float = 1e-6,
) -> tuple[float, float, int]:
    """Share of documents whose routing changed, and the loss change it caused.

    Parameters
    ----------
    before, after
        ``doc_id -> {expert_id: weight}`` of one domain's held-out documents at two steps.
    loss_before, loss_after
        ``doc_id -> mean token loss`` at the same two steps.

    Returns
    -------
    share, loss_delta, changed
        ``changed / n`` over documents present at both steps; ``loss_delta`` is the change
        of the domain's mean loss contributed by the re-routed documents
        (``sum over changed docs of (after - before) / n``); ``changed`` is the count.
    """
    common = sorted(set(before) & set(after) & set(loss_before) & set(loss_after))
    if not common:
        return 0.0, 0.0, 0
    changed = [d for d in common if _routing_differs(before[d], after[d], tol)]
    delta = sum(loss_after[d] - loss_before[d] for d in changed) / len(common)
    return len(changed) / len(common), float(delta), len(changed)


def routing_moves(
    before: dict[str, dict], after: dict[str, dict], tol: float = 1e-6
) -> dict[str, list[float]]:
    """Where one domain's re-routed held-out documents went, from two steps' per-document
    detail (``doc_id -> {"routing", "loss", "domain"?}``).

    Returns ``{destination: [documents, loss_delta]}``: the domain each was routed to
    (``"novel"``: none), with ``"/trunk"`` appended when the trunk alone served it (a domain
    without an expert yet); ``loss_delta`` is those documents' part of
    :func:`routing_change`'s delta (their loss change over the documents at both steps).
    """
    common = sorted(set(before) & set(after))
    moves: dict[str, list[float]] = {}
    for doc_id in common:
        old, new = before[doc_id], after[doc_id]
        if not _routing_differs(old["routing"], new["routing"], tol):
            continue
        where = new.get("domain") or "novel"
        if not new["routing"] and where != "novel":
            where += "/trunk"
        move = moves.setdefault(where, [0, 0.0])
        move[0] += 1
        move[1] += (new["loss"] - old["loss"]) / len(common)
    return {k: [n, round(d, 6)] for k, (n, d) in sorted(moves.items())}


def _routing_differs(a: dict[str, float], b: dict[str, float], tol: float) -> bool:
    if set(a) != set(b):
        return True
    return any(abs(a[k] - b[k]) > tol for k in a)
