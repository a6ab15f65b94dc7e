"""Weight forgetting: re-hash every tensor of the trunk and of every earlier expert.

Experts are write-once and the trunk is frozen, so forgetting through weights should be
impossible by construction; this check proves it at every step instead of trusting it.
A tensor is named ``trunk/<name>`` (the trunk in memory), ``expert/<id>/<name>`` (the
expert module in memory) or ``file/<id>/<name>`` (the tensor as stored on disk). The first
hash seen for a name is its reference; any later difference, a tensor that disappeared,
or a file that can no longer be read is reported as weight forgetting.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors import safe_open
from torch import nn

from experts.store import check_safetensors_header
from worx.ids import validate_id

log = logging.getLogger(__name__)


def tensor_sha256(tensor: torch.Tensor) -> str:
    """sha256 of a tensor's dtype, shape and raw bytes."""
    data = tensor.detach().to("cpu").contiguous()
    digest = hashlib.sha256(f"{data.dtype}|{tuple(data.shape)}|".encode())
    digest.update(data.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def hash_module(prefix: str, module: nn.Module) -> dict[str, str]:
    """``{prefix/name: sha256}`` for every parameter and buffer of ``module``."""
    return {f"{prefix}/{name}": tensor_sha256(t) for name, t in module.state_dict().items()}


def hash_safetensors(prefix: str, path: str | Path) -> dict[str, str]:
    """``{prefix/name: sha256}`` for every tensor stored in a safetensors file.

    Raises
    ------
    OSError, ValueError, safetensors.SafetensorError
        The file is missing or its header is corrupt or too long.
    """
    check_safetensors_header(path)  # a header over 1 MiB is refused before it is parsed
    out: dict[str, str] = {}
    with safe_open(str(path), framework="pt") as handle:
        for name in handle.keys():  # noqa: SIM118 - safe_open is not a dict
            out[f"{prefix}/{name}"] = tensor_sha256(handle.get_tensor(name))
    return out


class WeightWatch:
    """Compares tensor hashes with the first ones seen (kept in ``reference``, a dict you own).

    Parameters
    ----------
    reference
        ``name -> sha256`` first seen; persisted by the caller (the history file), so the
        check survives restarts.
    """

    def __init__(self, reference: dict[str, str]) -> None:
        self.reference = reference

    def check(self, current: Mapping[str, str], prefixes: list[str]) -> list[str]:
        """Report changes among ``prefixes`` (names known under them), record new names.

        Returns
        -------
        list of str
            ``"<name>: changed"`` or ``"<name>: missing"`` for every tensor whose hash
            differs from its reference, sorted; empty when nothing was forgotten.
        """
        problems: list[str] = []
        for name, sha in current.items():
            ref = self.reference.setdefault(name, sha)
            if ref != sha:
                problems.append(f"{name}: changed")
        for name in self.reference:
            if name not in current and any(name.startswith(p + "/") for p in prefixes):
                problems.append(f"{name}: missing")
        return sorted(problems)


def expert_weight_file(store_root: str | Path, expert_id: str) -> Path:
    """Where the store keeps an expert's weights (``<root>/<expert_id>/weights.safetensors``).

    Raises:
        UnsafeIdError: ``expert_id`` could name a path outside the store.
    """
    return Path(store_root) / validate_id(expert_id, kind="expert_id") / "weights.safetensors"
