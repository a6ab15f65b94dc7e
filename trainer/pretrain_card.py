"""What the trunk recipe writes beside the model: its report's command and model card.

Example
-------
>>> from trainer.pretrain_config import PretrainConfig
>>> reproduce_command(PretrainConfig(out_dir="t", steps=100), 100, 100)[:44]
'worx trunk pretrain --out t --layers 4 --wid'
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from trainer.pretrain_config import PretrainConfig, warmup_steps

REPORT_NAME = "pretrain_report.json"
CARD_NAME = "MODEL_CARD.md"


def versions() -> dict[str, str]:
    import tokenizers
    import transformers

    return {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
    }


def reproduce_command(cfg: PretrainConfig, steps_done: int, planned: int) -> str:
    """The ``worx trunk pretrain`` command that redoes this run step for step."""
    parts = ["worx trunk pretrain", f"--out {cfg.out_dir}"]
    if cfg.corpus_dir:
        parts.append(f"--corpus {cfg.corpus_dir}")
    parts += [
        f"--layers {cfg.layers}",
        f"--width {cfg.width}",
        f"--heads {cfg.n_heads}",
        f"--vocab-size {cfg.vocab_size}",
        f"--context {cfg.context}",
        f"--batch-size {cfg.batch_size}",
        f"--lr {cfg.lr:g}",
        f"--dropout {cfg.dropout:g}",
        f"--warmup-steps {warmup_steps(cfg)}",
        f"--seed {cfg.seed}",
        f"--steps {planned}",
        "--minutes 0",
    ]
    if steps_done < planned:
        parts.append(f"--stop-step {steps_done}")
    if cfg.max_docs_per_domain:
        parts.append(f"--max-docs-per-domain {cfg.max_docs_per_domain}")
    if cfg.train_domains != PretrainConfig.train_domains:
        parts.append("--train-domains " + ",".join(cfg.train_domains))
    if cfg.threads:
        parts.append(f"--threads {cfg.threads}")
    if cfg.reversible:
        parts.append("--reversible")
    parts += [f"--grow-at {spec}" for spec in cfg.grow_at]
    parts += [f"--device {cfg.device}", f"--save-dtype {cfg.save_dtype}", "--force"]
    return " ".join(parts)


def model_card(report: dict[str, Any]) -> str:
    """Markdown model card from a pretrain report."""
    rows = "\n".join(
        f"| {d} | {'yes' if r['trained_on'] else 'no'} | {r['tokens']:,} | {r['loss']:.3f} "
        f"| {r['ppl']:.1f} |"
        for d, r in sorted(report["heldout"].items())
    )
    mb = report["weights_bytes"] / 1e6
    if report["schedule"] == "time":
        reproduce_note = (
            f"This run decayed its learning rate over a {report['config']['minutes']:g}-minute "
            "time budget; the command below runs the same recipe over the same number of "
            "steps with a step-based schedule, so it matches the recipe, not bit for bit."
        )
    else:
        reproduce_note = (
            "This redoes the run step for step; on the same hardware, thread count and "
            "library versions the weights match, elsewhere they differ in the last bits."
        )
    return f"""# TrainingWorx default trunk

A small GPT-2-style causal language model pretrained from scratch by TrainingWorx's own
recipe (`trainer/recipes/pretrain_trunk.py`), for use as the frozen trunk under the experts.
It is a plain Hugging Face model directory: load it with
`AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)` and
`AutoTokenizer.from_pretrained(path)`. It is deliberately tiny (trained in minutes, fast on
two CPU cores), so expect simple, often ungrammatical English: it exists to be specialised
by experts, not to be used alone.

## Model

| | |
| --- | --- |
| architecture | {report["architecture"]}, tied input/output embeddings |
| layers / width / heads | {report["layers"]} / {report["width"]} / {report["heads"]} |
| context | {report["context"]} tokens |
| vocabulary | {report["vocab_size"]} (byte-level BPE, `<|endoftext|>` = eos = bos = pad) |
| parameters | {report["parameters"]:,} |
| weights | `model.safetensors`, {mb:.1f} MB, stored as {report["save_dtype"]} |

## Data

Bundled corpus `data/corpus` (sources and licences in `data/corpus/SOURCES.md`).

- Model training text: {", ".join(report["train_domains"])} only
  ({report["train_documents"]:,} documents, {report["train_tokens"]:,} tokens).
- Tokenizer training text: the training part of every domain
  ({", ".join(report["tokenizer_domains"])}).
- Held out of both: every document whose {report["heldout_rule"]}.

## Training

| | |
| --- | --- |
| steps | {report["steps"]:,} of {report["planned_steps"]:,} planned ({report["stopped_by"]}) |
| batch | {report["batch_size"]} x {report["context"]} tokens |
| tokens seen | {report["tokens_seen"]:,} ({report["epochs"]} epochs of the training text) |
| optimiser | AdamW (0.9, 0.95), lr {report["lr"]:g}, {report["warmup_steps"]} warm-up steps, \
cosine to a tenth, weight decay {report["weight_decay"]:g} on matrices, clip 1.0 |
| dropout | {report["dropout"]:g} |
| seed | {report["seed"]} |
| device | {report["device"]} ({report["device_name"]}, {report["threads"]} threads) |
| time | {report["train_s"]:.0f} s training ({report["tokens_per_s"]:,} tokens/s), \
{report["setup_s"]:.0f} s setup |
| loss | {report["initial_loss"]:.3f} at the first step, {report["final_loss"]:.3f} \
(mean of the last 20 steps) |
| versions | {", ".join(f"{k} {v}" for k, v in report["versions"].items())} |

## Held-out perplexity per domain

| domain | trained on | tokens | loss (nats/token) | perplexity |
| --- | --- | --- | --- | --- |
{rows}

## Reproduce

```
{report["reproduce"]}
```

{reproduce_note} The run was launched as:
`{report["command"] or "(from Python)"}`.
"""
