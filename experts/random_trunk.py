"""Write a randomly initialised Llama-shaped trunk to disk, one tensor at a time.

:func:`write_random_llama` writes a Hugging Face model directory (``config.json``, sharded
bf16 safetensors with ``model.safetensors.index.json``, and the bundled trunk's tokenizer,
since :func:`experts.trunk.load_trunk` insists on one) for any :class:`LlamaShape`, up to
:data:`LLAMA_7B` (6.74e9 parameters, 13.5 GB) on a machine with far less memory: the
tensor names and shapes come from transformers' own model built on the meta device, each
tensor is drawn from a generator seeded by ``(seed, its index)`` and streamed into its shard,
so at most one tensor (the 262 MB embedding of the 7B shape) is in memory. The directory is
written under ``<out>.partial`` and renamed when complete; a marker written last
(``worx-random-trunk.json``) lets :func:`is_complete` accept it again without rereading it.
Benches and tests only; speed and memory do not depend on the weights' values.

Example
-------
>>> import tempfile
>>> from experts.trunk import load_trunk
>>> with tempfile.TemporaryDirectory() as d:
...     path = write_random_llama(f"{d}/t", LlamaShape(2, 32, 2, 64, 8192), progress=False)
...     trunk = load_trunk(path)
...     trunk.num_layers, trunk.hidden_size, is_complete(path, LlamaShape(2, 32, 2, 64, 8192))
(2, 32, True)
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import struct
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm import tqdm

log = logging.getLogger(__name__)

MARKER = "worx-random-trunk.json"
INDEX = "model.safetensors.index.json"
_INIT_STD = 0.02  # transformers' LlamaConfig.initializer_range


@dataclass(frozen=True)
class LlamaShape:
    layers: int  # decoder blocks
    hidden: int  # width of the residual stream
    heads: int  # attention heads (as many key/value heads: no grouped-query attention)
    intermediate: int  # width of the gated MLP
    vocab: int  # rows of the (untied) embedding and output layer
    max_positions: int = 2048

    def num_params(self) -> int:
        per_block = 4 * self.hidden**2 + 3 * self.hidden * self.intermediate + 2 * self.hidden
        return self.layers * per_block + 2 * self.vocab * self.hidden + self.hidden


LLAMA_7B = LlamaShape(layers=32, hidden=4096, heads=32, intermediate=11008, vocab=32000)


def _llama_config(shape: LlamaShape, eos: int):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=shape.vocab,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.heads,
        max_position_embeddings=shape.max_positions,
        rms_norm_eps=1e-5,
        initializer_range=_INIT_STD,
        bos_token_id=eos,
        eos_token_id=eos,
        pad_token_id=eos,
        tie_word_embeddings=False,
        dtype="bfloat16",
    )


def tensor_specs(config) -> list[tuple[str, tuple[int, ...]]]:
    """``(name, shape)`` of every stored tensor of ``config``'s model, in transformers' order."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return [(name, tuple(t.shape)) for name, t in model.state_dict().items()]


def _random_tensor(shape: tuple[int, ...], seed: int, index: int) -> torch.Tensor:
    """Norm weights (1-D) are ones; matrices are N(0, 0.02) from generator ``(seed, index)``."""
    if len(shape) == 1:
        return torch.ones(shape, dtype=torch.bfloat16)
    generator = torch.Generator().manual_seed(seed * 1_000_003 + index)
    return torch.empty(shape, dtype=torch.bfloat16).normal_(0.0, _INIT_STD, generator=generator)


def _shards(
    specs: list[tuple[str, tuple[int, ...]]], max_shard_bytes: int
) -> list[list[tuple[str, tuple[int, ...]]]]:
    """Consecutive groups of tensors of at most ``max_shard_bytes`` (one tensor may exceed it)."""
    shards: list[list[tuple[str, tuple[int, ...]]]] = [[]]
    size = 0
    for name, shape in specs:
        nbytes = 2 * math.prod(shape)
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append((name, shape))
        size += nbytes
    return shards


def _header(shard: list[tuple[str, tuple[int, ...]]]) -> bytes:
    """The safetensors header (8-byte length + JSON padded to 8 bytes) of ``shard`` in bf16."""
    entries: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in shard:
        nbytes = 2 * math.prod(shape)
        entries[name] = {
            "dtype": "BF16",
            "shape": list(shape),
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
    body = json.dumps(entries, separators=(",", ":")).encode()
    body += b" " * (-len(body) % 8)  # tensor data starts 8-byte aligned
    return struct.pack("<Q", len(body)) + body


def is_complete(out_dir: str | Path, shape: LlamaShape, seed: int = 0) -> bool:
    """Whether ``out_dir`` is a trunk this module wrote completely for ``shape`` and ``seed``."""
    root = Path(out_dir)
    try:
        marker = json.loads((root / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if marker.get("shape") != asdict(shape) or marker.get("seed") != seed:
        return False
    files = marker.get("files", {})
    return bool(files) and all(
        (root / name).is_file() and (root / name).stat().st_size == size
        for name, size in files.items()
    )


def write_random_llama(
    out_dir: str | Path,
    shape: LlamaShape = LLAMA_7B,
    *,
    seed: int = 0,
    max_shard_bytes: int = 2 * 2**30,
    tokenizer_dir: str | Path | None = None,
    progress: bool = True,
) -> Path:
    """Write a random bf16 Llama of ``shape`` to ``out_dir`` (or reuse it if complete).

    ``tokenizer_dir``: whose tokenizer to copy (default: the bundled trunk's; its ids must be
    below ``shape.vocab``). Raises ``FileExistsError`` if ``out_dir`` exists and is not a
    complete trunk of this shape and seed (it is never removed: remove it, or pick another).
    """
    from transformers import AutoTokenizer

    from worx.bundled import trunk_dir

    out = Path(out_dir)
    if is_complete(out, shape, seed):
        log.info("reusing the random trunk in %s", out)
        return out
    if out.exists():
        raise FileExistsError(
            f"{out} exists but is not a complete random trunk of {shape} (seed {seed}); "
            "remove it or choose another directory"
        )
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)  # a write of ours that was interrupted
    partial.mkdir(parents=True)
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir or trunk_dir()))
    if len(tokenizer) > shape.vocab:
        raise ValueError(
            f"the tokenizer has {len(tokenizer)} tokens, more than vocab {shape.vocab}"
        )
    tokenizer.save_pretrained(str(partial))
    config = _llama_config(shape, tokenizer.eos_token_id)
    config.save_pretrained(str(partial))
    specs = tensor_specs(config)
    index = {name: i for i, (name, _) in enumerate(specs)}
    shards = _shards(specs, max_shard_bytes)
    total = sum(2 * math.prod(s) for _, s in specs)
    weight_map: dict[str, str] = {}
    files: dict[str, int] = {}
    bar = tqdm(total=total, unit="B", unit_scale=True, desc="write trunk", disable=not progress)
    try:
        for number, shard in enumerate(shards, start=1):
            name = f"model-{number:05d}-of-{len(shards):05d}.safetensors"
            with open(partial / name, "wb") as handle:
                handle.write(_header(shard))
                for tensor_name, tensor_shape in shard:
                    tensor = _random_tensor(tensor_shape, seed, index[tensor_name])
                    handle.write(tensor.view(torch.uint8).numpy().data)  # no copy
                    bar.update(tensor.numel() * 2)
                    weight_map[tensor_name] = name
                handle.flush()
                os.fsync(handle.fileno())
            files[name] = (partial / name).stat().st_size
    finally:
        bar.close()
    (partial / INDEX).write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2),
        encoding="utf-8",
    )
    marker = {"shape": asdict(shape), "seed": seed, "params": shape.num_params(), "files": files}
    (partial / MARKER).write_text(json.dumps(marker, indent=2), encoding="utf-8")
    os.replace(partial, out)
    log.info("wrote a random %s (%d parameters) to %s", shape, shape.num_params(), out)
    return out
