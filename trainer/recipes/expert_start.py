"""Where a job's expert starts (the expert recipe's model setup): from zero, as a copy of the
job's parent (a drift job), or as a copy of the stored expert that fits the job's held-out
documents best, if one beats the trunk alone (DEMix); a copy grows where the configured
shape is larger or the job's data has outgrown it (experts/growth.py, docs/trainer.md
"Growth"). The parent and the candidates are never modified.

Example
-------
>>> start = Start(parent=None)  # no parent, no candidates: a zero-initialised expert
>>> config = ExpertConfig(kind="adapter", layers=(0,), rank=2)
>>> start.expert(config, hidden_size=8).config == config
True
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from experts.expert import Expert, ExpertConfig
from experts.growth import check_growable, grow, growth_record, scaled_config, union_config
from experts.mixture import Mixture
from experts.trunk import Trunk
from trainer.config import TrainerConfig
from trainer.recipes.heldout import HeldOutRows

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Start:
    """How the expert starts (the recipe's summary reports every field)."""

    parent: Expert | None  # the expert it starts as a copy of; None: zero-initialised
    started_from: str | None = None  # the candidate copied (DEMix); None: none was
    candidate_ppl: dict[str, float] = field(default_factory=dict)  # each candidate's ppl
    candidate_trunk_ppl: float | None = None  # the trunk alone on every row, when measured
    growth: dict[str, Any] | None = None  # how the copy grew; None: the parent's shape

    def expert(self, configured: ExpertConfig, hidden_size: int) -> Expert:
        """The expert that starts: a fresh one of ``configured``, or the parent's copy (grown
        or not, step 0 computes exactly the parent's function)."""
        if self.parent is None:
            return Expert(configured, hidden_size)
        if self.growth is None:
            return Expert.branch(self.parent)
        return grow(self.parent, ExpertConfig.from_dict(self.growth["to"]))


@torch.no_grad()
def plan_start(
    trunk: Trunk,
    config: TrainerConfig,
    heldout: HeldOutRows,
    configured: ExpertConfig,
    *,
    parent: Expert | None,
    candidates: Mapping[str, Expert],
    parent_id: str | None,
    own_ppl: Mapping[str, float],
) -> Start:
    """The start of a job configured for ``configured`` (``own_ppl``: each known expert's
    held-out ppl on its own documents at registration, by id; the growth rule's reference).
    """
    start = Start(parent=parent)
    if parent is None and candidates:
        start = best_candidate(trunk, candidates, heldout, config.candidate_eval_rows)
    if start.parent is None:
        return start
    own = own_ppl.get(parent_id or start.started_from or "")
    fit = parent_fit_ratio(trunk, config, heldout, start, own)
    growth = growth_plan(
        start.parent, configured, config, trunk.num_layers, fit, trunk.num_params()
    )
    return dataclasses.replace(start, growth=growth)


def best_candidate(
    trunk: Trunk, candidates: Mapping[str, Expert], heldout: HeldOutRows, rows: int
) -> Start:
    """DEMix: start as a copy of the candidate that fits ``heldout`` best (on its first
    ``rows`` rows; 0: every row), if any beats the trunk alone; else from zero."""
    on_device = {
        expert_id: Expert.branch(expert).requires_grad_(False).to(heldout.device)
        for expert_id, expert in candidates.items()
    }  # copies: evaluating never touches the stored experts, wherever they live
    mixture = Mixture(trunk, on_device)
    rows = rows or len(heldout)  # 0: every held-out row
    trunk_ppl = heldout.perplexity(mixture, {}, rows)
    # the trunk's figure on every row: the recipe's step 0 reuses it
    every_row = trunk_ppl if rows >= len(heldout) else None
    ppl = {
        expert_id: heldout.perplexity(mixture, {expert_id: 1.0}, rows)
        for expert_id in sorted(candidates)
    }
    best = min(ppl, key=ppl.__getitem__)
    if ppl[best] >= trunk_ppl:
        return Start(parent=None, candidate_ppl=ppl, candidate_trunk_ppl=every_row)
    log.info("starting from expert %s (held-out ppl %.4g; trunk %.4g)", best, ppl[best], trunk_ppl)
    return Start(
        parent=candidates[best], started_from=best, candidate_ppl=ppl, candidate_trunk_ppl=every_row
    )


def parent_fit_ratio(
    trunk: Trunk, config: TrainerConfig, heldout: HeldOutRows, start: Start, own: float | None
) -> float | None:
    """The parent's held-out ppl on the job's documents over ``own``, its own at registration
    (None: no reference, or the growth rule is off)."""
    if not own or not config.growth_fit_ratio:
        return None
    if start.started_from is not None:
        here = start.candidate_ppl[start.started_from]
    else:
        copy = Expert.branch(start.parent).requires_grad_(False).to(heldout.device)
        rows = config.candidate_eval_rows or len(heldout)
        here = heldout.perplexity(Mixture(trunk, {"parent": copy}), {"parent": 1.0}, rows)
    return here / own


def growth_plan(
    parent: Expert,
    configured: ExpertConfig,
    config: TrainerConfig,
    num_layers: int,
    fit: float | None,
    trunk_params: int,
) -> dict[str, Any] | None:
    """How a start from ``parent`` grows (None: it keeps the parent's shape).

    It takes the configured shape where that is larger (``grow_to_configured``), and its
    ranks grow by ``growth_rank_factor`` (and it gets an adapter in every one of the trunk's
    ``num_layers`` blocks with ``growth_all_layers``) when the parent explains the job's
    held-out documents ``growth_fit_ratio`` times worse than its own at registration
    (``fit``), unless the grown expert would hold more than ``growth_max_trunk_share`` of
    the trunk's ``trunk_params`` (then it keeps the parent's shape: ``over_budget``).
    """
    shape = parent.config
    target, reasons = shape, []
    if config.growth_fit_ratio and fit is not None and fit >= config.growth_fit_ratio:
        target = scaled_config(shape, config.growth_rank_factor, config.growth_max_rank)
        if config.growth_all_layers and shape.layers:
            target = dataclasses.replace(target, layers=tuple(range(num_layers)))
        budget = config.growth_max_trunk_share * trunk_params
        if budget and _params(target, parent.hidden_size) > budget:
            log.info("the start keeps its parent's shape: grown, it would exceed the budget")
            target = shape
            reasons.append("over_budget")
        else:
            reasons.append("outgrown")
    if config.grow_to_configured:
        target = union_config(target, configured)
        if union_config(shape, configured) != shape:
            reasons.append("configured_shape")
    if target == shape:
        return None
    check_growable(shape, target)
    return {
        "reasons": reasons,
        "parent_fit_ratio": None if fit is None else round(fit, 4),
        "from": shape.to_dict(),
        "to": target.to_dict(),
        "changed": growth_record(shape, target),
        "params_before": parent.num_params(),
    }


def _params(config: ExpertConfig, hidden_size: int) -> int:
    """Parameters of an expert of ``config``, counted without allocating it."""
    with torch.device("meta"):
        return Expert(config, hidden_size).num_params()
