"""Mixed precision: which autocast a forward pass runs under.

On a GPU the recipes run the forward pass under bf16 autocast (master weights, optimizer
states and the loss stay fp32); on the CPU they stay fp32, where bf16 autocast is slower
and changes the figures.

Example
-------
>>> import torch
>>> with autocast_for(torch.device("cpu")):
...     (torch.ones(2, 2) @ torch.ones(2, 2)).dtype
torch.float32
"""

from __future__ import annotations

import contextlib

import torch


def autocast_for(device: torch.device, bf16: bool = True) -> contextlib.AbstractContextManager:
    """bf16 autocast on a CUDA ``device`` when ``bf16`` is set; otherwise no autocast."""
    if bf16 and device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()
