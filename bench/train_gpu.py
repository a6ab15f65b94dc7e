"""GPU benchmark: the expert recipe against a dense fine-tune on a ~1B-parameter trunk.

A Llama-style config of about 1B parameters with random weights (speed does not depend on
the weights), built directly on the GPU; the same documents and the same number of tokens
for every run; each run in a fresh subprocess. Prints ONE JSON line with, per run,
tokens/s, model FLOP utilisation (MFU) and peak GPU memory, and the ratios expert/dense.

Runs:

* ``expert``: the recipe with its GPU savers: trunk in bf16, bf16 autocast, 8-bit AdamW
  states kept in host memory (offload), activation checkpointing, chunked loss;
* ``expert_no_savers``: trunk in bf16 and bf16 autocast, fp32 AdamW on the GPU, no
  checkpointing, full logits;
* ``dense``: every weight trainable (fp32 master weights), bf16 autocast, torch AdamW.

MFU counts model FLOPs only (recomputation excluded) against ``--peak-tflops`` (default
989, the H100/H200 SXM dense bf16 figure): dense training is 3 forward passes' worth; the
expert's is one forward plus the input-gradient pass from the top of the trunk down to its
lowest adapter layer, plus the adapters' own forward and backward.

``--tiny`` runs the same comparison on the CPU at a toy size in seconds (a smoke test of the
code path; its speed figures mean nothing, and there is no GPU memory to report).

Usage::

    python bench/train_gpu.py               # on a machine with a CUDA GPU (a few minutes)
    python bench/train_gpu.py --tiny        # anywhere
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from worx.bundled import corpus_files, file_domain, read_lines  # noqa: E402

# ~1.0B parameters: Llama layout, untied embeddings
BIG = {
    "layers": 16,
    "width": 2048,
    "heads": 16,
    "ffn": 5632,
    "vocab": 32000,
    "seq_len": 1024,
    "micro_batch": 8,
    "steps": 12,
    "warmup": 2,
}
TINY = {
    "layers": 2,
    "width": 64,
    "heads": 2,
    "ffn": 176,
    "vocab": 512,
    "seq_len": 64,
    "micro_batch": 4,
    "steps": 3,
    "warmup": 1,
}
RUNS = ("expert", "expert_no_savers", "dense")


def corpus_texts(limit_chars: int) -> list[str]:
    """Documents of every bundled domain, round-robin, up to ``limit_chars`` characters."""
    domains = [file_domain(path) for path in corpus_files()]
    streams = [iter(read_lines(domains=[domain])) for domain in domains]
    texts: list[str] = []
    total = 0
    while total < limit_chars and streams:
        for stream in list(streams):
            line = next(stream, None)
            if line is None:
                streams.remove(stream)
                continue
            texts.append(line.text)
            total += len(line.text)
    return texts


def model_flops_per_token(
    shape: dict, first_expert_layer: int, expert_params: int, kind: str
) -> float:
    """Model FLOPs per trained token (no recomputation), PaLM-style accounting."""
    d, layers, t, vocab = shape["width"], shape["layers"], shape["seq_len"], shape["vocab"]
    per_layer = 2 * (4 * d * d + 3 * d * shape["ffn"]) + 4 * t * d  # matmuls + attention, forward
    head = 2 * d * vocab
    forward = layers * per_layer + head
    if kind == "dense":
        return 3.0 * forward
    path = (layers - first_expert_layer) * per_layer + head  # input gradients only
    return forward + path + 6.0 * expert_params


def run_one(name: str, spec: dict) -> dict:
    import torch

    from experts.trunk import Trunk
    from trainer.config import TrainerConfig
    from trainer.expert_setup import default_layers
    from trainer.recipes.dense import DenseConfig, dense_finetune
    from trainer.recipes.expert import train_expert

    shape = spec["shape"]
    device = "cuda" if torch.cuda.is_available() and not spec["tiny"] else "cpu"
    if device == "cpu":
        torch.set_num_threads(2)
    model = build_model(
        shape, device, dtype=torch.float32 if name == "dense" or device == "cpu" else torch.bfloat16
    )
    tokenizer = load_tokenizer(spec["tokenizer"])
    train, heldout = spec["train"], spec["heldout"]
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    out: dict = {"device": device}
    if name == "dense":
        model.requires_grad_(True)
        cfg = DenseConfig(
            steps=shape["steps"],
            seq_len=shape["seq_len"],
            micro_batch_size=shape["micro_batch"],
            grad_accum_steps=1,
            lr=1e-4,
            warmup_steps=shape["warmup"],
            progress=False,
        )
        result = dense_finetune(model, tokenizer, train, cfg)
        tokens, seconds = result.tokens, result.elapsed_s
        flops = model_flops_per_token(shape, 0, 0, "dense")
        out["trainable_params"] = result.trainable_params
    else:
        model.requires_grad_(False)
        model.eval()
        trunk = Trunk(
            model=model,
            tokenizer=tokenizer,
            fingerprint="random-" + name,
            hidden_size=shape["width"],
            num_layers=shape["layers"],
            family="llama",
            path=Path(spec["tokenizer"]),
        )
        savers = name == "expert"
        eight_bit = savers and importlib.util.find_spec("bitsandbytes") is not None
        if savers and not eight_bit:
            out["note"] = "bitsandbytes is not installed here: fp32 AdamW states instead of 8-bit"
        cfg = TrainerConfig(
            max_steps=shape["steps"],
            seq_len=shape["seq_len"],
            micro_batch_size=shape["micro_batch"],
            grad_accum_steps=1,
            warmup_steps=shape["warmup"],
            eval_every=10_000,
            max_eval_rows=16,
            optimizer="adamw8bit" if eight_bit else "adamw",
            activation_checkpointing=savers,
            chunked_loss=savers,
            offload_optimizer=savers,
            bf16=True,
            mmap_trunk=False,
            device=device,
            progress=False,
        )
        result = train_expert(trunk, train, heldout, cfg)
        tokens, seconds = result.summary["tokens_seen"], result.summary["elapsed_s"]
        layers = default_layers(trunk, cfg)
        flops = model_flops_per_token(
            shape, min(layers), result.summary["trainable_params"], "expert"
        )
        out["trainable_params"] = result.summary["trainable_params"]
        out["optimizer_bytes_per_param"] = round(
            result.summary["optimizer_state_bytes"] / result.summary["trainable_params"], 4
        )
        out["savers"] = result.summary["savers"]
    out["tokens"] = tokens
    out["tokens_per_s"] = round(tokens / seconds, 1)
    achieved = flops * tokens / seconds
    out["model_tflops_per_s"] = round(achieved / 1e12, 3)
    out["mfu"] = round(achieved / (spec["peak_tflops"] * 1e12), 4) if spec["peak_tflops"] else None
    if device == "cuda":
        out["peak_gpu_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 3)
    else:
        import resource

        out["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return out


def build_model(shape: dict, device: str, dtype):
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(
        vocab_size=shape["vocab"],
        hidden_size=shape["width"],
        intermediate_size=shape["ffn"],
        num_hidden_layers=shape["layers"],
        num_attention_heads=shape["heads"],
        num_key_value_heads=shape["heads"],
        max_position_embeddings=shape["seq_len"],
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model


def load_tokenizer(path: str):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tiny", action="store_true", help="toy size on the CPU (smoke test)")
    parser.add_argument("--steps", type=int, help="optimizer steps per run")
    parser.add_argument(
        "--peak-tflops",
        type=float,
        default=None,
        help="accelerator peak bf16 TFLOP/s for MFU (default 989 on a GPU)",
    )
    parser.add_argument(
        "--runs", default=",".join(RUNS), help="comma-separated subset of " + ",".join(RUNS)
    )
    parser.add_argument("--run-one", help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run_one:
        print(
            json.dumps(run_one(args.run_one, json.loads(Path(args.spec).read_text()))), flush=True
        )
        return 0

    import torch

    from experts.tokenizer import train_bpe_tokenizer

    tiny = args.tiny or not torch.cuda.is_available()
    shape = dict(TINY if tiny else BIG)
    if args.steps:
        shape["steps"] = args.steps
    peak = args.peak_tflops if args.peak_tflops is not None else (None if tiny else 989.0)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="worx-bench-gpu-") as tmp:
        work = Path(tmp)
        texts = corpus_texts(400_000 if tiny else 1_500_000)
        train_bpe_tokenizer(texts[:2000], min(shape["vocab"], 8192), work / "tok")
        spec = {
            "shape": shape,
            "tiny": tiny,
            "tokenizer": str(work / "tok"),
            "peak_tflops": peak,
            "train": texts[16:],
            "heldout": texts[:16],
        }
        (work / "spec.json").write_text(json.dumps(spec))
        runs = {}
        for name in args.runs.split(","):
            if name not in RUNS:
                parser.error(f"unknown run {name!r}; choose from {', '.join(RUNS)}")
            done = subprocess.run(
                [sys.executable, __file__, "--run-one", name, "--spec", str(work / "spec.json")],
                capture_output=True,
                text=True,
                cwd=REPO,
            )
            if done.returncode != 0:
                sys.stderr.write(done.stderr[-4000:])
                raise SystemExit(f"bench run {name} failed with exit code {done.returncode}")
            runs[name] = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"# {name}: {runs[name]}", file=sys.stderr, flush=True)
    expert, dense = runs.get("expert", {}), runs.get("dense", {})

    def ratio(key: str, a: dict, b: dict) -> float | None:
        return round(a[key] / b[key], 4) if a.get(key) and b.get(key) else None

    params = _param_count(shape)
    print(
        json.dumps(
            {
                "bench": "train_gpu",
                "tiny": tiny,
                "device": torch.cuda.get_device_name(0) if not tiny else "cpu",
                "trunk_params": params,
                "shape": shape,
                "runs": runs,
                "expert_over_dense_time_per_token": ratio("tokens_per_s", dense, expert),
                "expert_over_dense_peak_gpu_memory": ratio("peak_gpu_memory_gib", expert, dense),
                "elapsed_s": round(time.perf_counter() - started, 1),
            }
        )
    )
    return 0


def _param_count(shape: dict) -> int:
    d = shape["width"]
    per_layer = 4 * d * d + 3 * d * shape["ffn"] + 2 * d
    return shape["layers"] * per_layer + 2 * shape["vocab"] * d + d


if __name__ == "__main__":
    sys.exit(main())
