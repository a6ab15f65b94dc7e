"""What an expert job is built from: the device, the prepared trunk, the fresh expert's config.

Example
-------
>>> from experts.trunk import load_trunk
>>> from worx.bundled import trunk_dir
>>> config = expert_config_for(load_trunk(trunk_dir()), TrainerConfig())
>>> config.kind, config.layers, config.token_layer, config.token_site, config.vocab_size
('vocab_adapter', (2, 3), 3, 'mlp', 8192)
"""

from __future__ import annotations

from pathlib import Path

import torch

from experts.shape import ExpertConfig, upper_half
from experts.trunk import Trunk
from trainer.config import TrainerConfig
from trainer.fused_loss import output_layer
from trainer.mapped_trunk import map_stored_weights
from trainer.mmap_weights import mmap_trunk_weights


def resolve_device(config: TrainerConfig) -> torch.device:
    if config.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(config.device)


def prepare_trunk(trunk: Trunk, config: TrainerConfig, cache_dir: Path | None = None) -> None:
    """Memory-map the trunk's weights (CPU, once per trunk) when ``config.mmap_trunk``.

    With ``config.stream_trunk`` the weights become views of the files in the stored dtype
    (:func:`trainer.mapped_trunk.map_stored_weights`), the mapping the recipe streams from.

    ``cache_dir`` holds a copy in the loaded dtype when the stored one differs (see
    :func:`trainer.mmap_weights.mmap_trunk_weights`). With the saver off, every weight is
    copied into anonymous process memory, whatever the loader did (recent transformers
    versions may map the files themselves), so the saver's effect is measurable.
    """
    if trunk.device.type != "cpu":
        return
    if config.stream_trunk:  # the file's own mappings, in its dtype (trainer/stream_trunk.py)
        if "_worx_mapped" not in trunk.model.__dict__:
            trunk.model.__dict__["_worx_mapped"] = map_stored_weights(trunk.model, trunk.path)
            trunk.model.__dict__["_worx_mmapped"] = True
        return
    if "_worx_mmapped" in trunk.model.__dict__:
        return
    if config.mmap_trunk:
        cache = None
        if cache_dir is not None:
            dtype = str(trunk.dtype).removeprefix("torch.")
            cache = cache_dir / f"trunk-{trunk.fingerprint[:16]}-{dtype}.safetensors"
        mmap_trunk_weights(trunk.model, trunk.path, cache)
        trunk.model.__dict__["_worx_mmapped"] = True
    else:
        with torch.no_grad():
            for tensor in [*trunk.model.parameters(), *trunk.model.buffers()]:
                tensor.data = tensor.data.clone()
        trunk.model.__dict__["_worx_mmapped"] = False


def savers_on(
    trunk: Trunk, config: TrainerConfig, device: torch.device, offload_optimizer: bool
) -> dict[str, object]:
    """Which memory savers a job of ``config`` on ``trunk`` runs with (its summary's)."""
    return {
        "optimizer": config.optimizer,
        "activation_checkpointing": config.activation_checkpointing,
        "mmap_trunk": bool(trunk.model.__dict__.get("_worx_mmapped", False)),
        "stream_trunk": config.stream_trunk and device.type == "cpu",
        "offload_optimizer": offload_optimizer,
        "chunked_loss": config.chunked_loss,
        "bf16": config.bf16 and device.type == "cuda",
    }


def default_layers(trunk: Trunk, config: TrainerConfig) -> tuple[int, ...]:
    """``config.expert.layers``, or the upper half of the trunk's blocks."""
    return config.expert.layers or upper_half(trunk.num_layers)


def expert_config_for(trunk: Trunk, config: TrainerConfig) -> ExpertConfig:
    """The :class:`ExpertConfig` of a fresh expert of ``config.expert`` on ``trunk``: what the
    shape leaves to the trunk filled in (:meth:`ExpertConfig.for_trunk`)."""
    return config.expert.for_trunk(trunk.num_layers, trunk_vocab_size(trunk))


def trunk_vocab_size(trunk: Trunk) -> int:
    """Rows of the trunk's output layer (the logits' width)."""
    return int(output_layer(trunk.model).weight.shape[0])
