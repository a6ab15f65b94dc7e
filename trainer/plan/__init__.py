"""Memory and speed planner for training on a trunk of any size (``worx plan``).

``plan_training(trunk, expert, run, hardware)`` answers, for expert training and for a dense
fine-tune side by side: how many bytes each part takes, where it lives in the first
placement that fits the machine, whether anything fits (and why not), and the tokens/s
that FLOPs at a stated utilisation allow. docs/trainer.md, "Sizing: worx plan".
"""

from trainer.plan.bytes import PROCESS_OVERHEAD_BYTES
from trainer.plan.expert_spec import ExpertSpec
from trainer.plan.placement import Component, Placement
from trainer.plan.plan import TrainingPlan, plan_training
from trainer.plan.run import Hardware, RunShape
from trainer.plan.shapes import ShapeError, TrunkShape
from trainer.plan.units import parse_bytes, parse_count

__all__ = [
    "PROCESS_OVERHEAD_BYTES",
    "Component",
    "ExpertSpec",
    "Hardware",
    "Placement",
    "RunShape",
    "ShapeError",
    "TrainingPlan",
    "TrunkShape",
    "parse_bytes",
    "parse_count",
    "plan_training",
]
