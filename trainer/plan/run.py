"""What a plan is asked about: the training shape and savers (:class:`RunShape`) and the
machine (:class:`Hardware`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from trainer.optim import OPTIMIZERS
from trainer.plan.shapes import dtype_bytes

if TYPE_CHECKING:
    from trainer.config import TrainerConfig


@dataclass(frozen=True)
class RunShape:
    micro_batch: int = 8  # rows per forward/backward
    seq_len: int = 128  # tokens per row
    grad_accum: int = 4  # micro-batches per optimizer step (offload costs are per step)
    optimizer: str = "adamw8bit"  # the expert's optimizer: "adamw8bit" or "adamw" (fp32)
    activation_checkpointing: bool = True  # recompute the trunk blocks the gradient passes
    chunked_loss: bool = True  # the expert's loss in chunks of loss_chunk tokens
    loss_chunk: int = 256  # tokens per chunk of the chunked loss
    fused_frozen_mlp: bool = True  # GPT-2 frozen MLPs keep one tensor (trainer/frozen_mlp.py)
    mmap_trunk: bool = True  # CPU: trunk memory-mapped from safetensors (else copied in)
    offload_optimizer: bool = True  # GPU: allow optimizer state + master weights in host memory
    trunk_dtype: str = "float32"  # dtype of the trunk in memory (float32, bfloat16, float16)
    bf16_autocast: bool = True  # GPU: bf16 autocast (activations in bf16)
    stream_layers: int = 2  # blocks held on each GPU at once when the trunk streams to it

    def __post_init__(self) -> None:
        if min(self.micro_batch, self.grad_accum, self.loss_chunk) < 1 or self.seq_len < 2:
            raise ValueError("micro_batch, grad_accum and loss_chunk must be >= 1 and seq_len >= 2")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer {self.optimizer!r}: use one of {OPTIMIZERS}")
        if self.stream_layers < 1:
            raise ValueError("stream_layers must be >= 1")
        dtype_bytes(self.trunk_dtype)  # raises for an unknown dtype

    @classmethod
    def from_trainer_config(cls, config: TrainerConfig, **shape: Any) -> RunShape:
        """The shape and savers a :class:`trainer.config.TrainerConfig` trains with;
        ``shape`` overrides fields (e.g. ``micro_batch``, ``trunk_dtype``)."""
        savers = {
            "micro_batch": config.micro_batch_size,
            "seq_len": config.seq_len,
            "grad_accum": config.grad_accum_steps,
            "optimizer": config.optimizer,
            "activation_checkpointing": config.activation_checkpointing,
            "chunked_loss": config.chunked_loss,
            "loss_chunk": config.loss_chunk,
            "fused_frozen_mlp": config.fused_frozen_mlp,
            "mmap_trunk": config.mmap_trunk,
            "offload_optimizer": config.offload_optimizer,
            "bf16_autocast": config.bf16,
        }
        return cls(**{**savers, **shape})

    @property
    def tokens(self) -> int:
        """Tokens per micro-batch."""
        return self.micro_batch * self.seq_len

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Hardware:
    gpus: int = 0  # GPUs on the node (0: train on the CPU)
    gpu_bytes: int = 80 * 2**30  # memory of each GPU
    host_bytes: int = 64 * 2**30  # host RAM available to training
    disk_bytes: int = 2 * 10**12  # free disk (NVMe) for the trunk file, store, checkpoints
    gpu_flops: float = 989e12  # peak dense bf16 FLOP/s of one GPU (H100/H200 SXM)
    host_flops: float = 2e11  # peak FLOP/s of the host CPU (2 AVX2+FMA cores, fp32: ~0.2 T)
    mfu: float = 0.4  # model FLOP utilisation the tokens/s prediction assumes
    disk_bytes_per_s: float = 2e9  # sequential read from disk (streamed trunk)
    pcie_bytes_per_s: float = 25e9  # host <-> GPU copies (offloaded optimizer, streaming)
    host_adam_params_per_s: float = 1e9  # a host-side Adam step (offloaded dense optimizer)

    def __post_init__(self) -> None:
        if self.gpus < 0:
            raise ValueError("gpus must be >= 0")
        if min(self.gpu_bytes, self.host_bytes, self.disk_bytes) < 0:
            raise ValueError("memory and disk sizes must be >= 0")
        if not 0 < self.mfu <= 1:
            raise ValueError(f"mfu must be in (0, 1], got {self.mfu}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
