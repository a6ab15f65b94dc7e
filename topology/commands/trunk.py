"""`worx trunk`: pretrain the default trunk, or describe a trunk directory."""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import sys
import threading
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "trunk",
        help="pretrain a small default trunk, or describe a trunk directory",
        description="The trunk is the frozen causal language model under the experts. "
        "`pretrain` trains a small GPT-2-style model from scratch on the bundled corpus; "
        "`info` describes any Hugging Face trunk directory.",
    )
    sub = parser.add_subparsers(dest="trunk_command", metavar="ACTION")
    sub.required = True

    pre = sub.add_parser(
        "pretrain",
        help="train a small GPT-2-style trunk from scratch on the bundled corpus",
        description="Train a byte-level BPE tokenizer on all bundled domains and a GPT-2-style "
        "causal LM on general English (fiction_austen and news), hold out a slice of every "
        "domain, and write a Hugging Face model directory with MODEL_CARD.md (data, steps, "
        "loss, per-domain perplexity, the command that reproduces it). With --minutes the "
        "step count is fixed from the speed measured in the first steps.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    pre.add_argument("--out", default="trunk", help="output directory")
    pre.add_argument(
        "--force", action="store_true", help="replace an existing trunk directory at --out"
    )
    pre.add_argument(
        "--corpus",
        default="",
        help="folder of <domain>.jsonl.gz (default: the bundled data/corpus)",
    )
    pre.add_argument(
        "--train-domains",
        default="fiction_austen,news",
        help="comma-separated domains the model trains on",
    )
    pre.add_argument(
        "--minutes",
        type=float,
        default=20.0,
        help="training time budget (0: none, then --steps is required)",
    )
    pre.add_argument(
        "--steps",
        type=int,
        default=0,
        help="optimizer steps (schedule length); with --minutes, the smaller wins",
    )
    pre.add_argument("--stop-step", type=int, default=0, help=argparse.SUPPRESS)
    pre.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (bf16 autocast)")
    pre.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch default)")
    pre.add_argument("--layers", type=int, default=4, help="transformer blocks")
    pre.add_argument("--width", type=int, default=256, help="hidden size")
    pre.add_argument("--heads", type=int, default=0, help="attention heads (0: width/64)")
    pre.add_argument("--vocab-size", type=int, default=8192, help="BPE vocabulary size")
    pre.add_argument("--context", type=int, default=256, help="sequence length")
    pre.add_argument(
        "--batch-size",
        type=int,
        default=16,
        help="sequences per step (raise it on a GPU, e.g. 128)",
    )
    pre.add_argument("--lr", type=float, default=1e-3, help="peak learning rate")
    pre.add_argument(
        "--warmup-steps",
        type=int,
        default=0,
        help="warm-up steps (0: a tenth of --steps, at most 100)",
    )
    pre.add_argument("--dropout", type=float, default=0.0, help="dropout")
    pre.add_argument(
        "--reversible",
        action="store_true",
        help="a reversible trunk: two residual streams, activations recomputed from the "
        "outputs in backward (memory flat in depth); loads like any trunk (needs dropout 0)",
    )
    pre.add_argument(
        "--grow-at",
        action="append",
        default=[],
        type=_growth_spec,
        metavar="STEP:LAYERSxWIDTH",
        help="grow the trunk before step STEP to LAYERS blocks of width WIDTH (a multiple "
        "of the width before), function-preservingly: zero-output inserted blocks, copied "
        "units; repeatable, in step order; --layers/--width give the starting shape",
    )
    pre.add_argument("--seed", type=int, default=0, help="random seed")
    pre.add_argument("--max-docs-per-domain", type=int, default=0, help=argparse.SUPPRESS)
    pre.add_argument(
        "--eval-tokens",
        type=int,
        default=65_536,
        help="held-out tokens evaluated per domain at most",
    )
    pre.add_argument(
        "--save-dtype",
        default="auto",
        choices=["auto", "float32", "float16", "bfloat16"],
        help="weights dtype on disk; auto: float16 if float32 exceeds 20 MB",
    )
    pre.add_argument("--no-progress", action="store_true", help="no progress bar")
    pre.set_defaults(func=run_pretrain)

    info = sub.add_parser(
        "info",
        help="describe a trunk directory (default: the configured or bundled trunk)",
        description="Print the architecture, size, tokenizer and, for trunks made by "
        "`worx trunk pretrain`, the training figures and per-domain perplexity.",
    )
    info.add_argument(
        "dir",
        nargs="?",
        default=None,
        help="trunk directory (default: experts.trunk_dir, else the bundled one)",
    )
    info.add_argument("--json", action="store_true", help="print one JSON object")
    info.set_defaults(func=run_info)


def run_pretrain(args: argparse.Namespace) -> int:
    from trainer.recipes.pretrain_trunk import PretrainConfig, pretrain

    domains = tuple(d.strip() for d in args.train_domains.split(",") if d.strip())
    cfg = PretrainConfig(
        out_dir=args.out,
        corpus_dir=args.corpus,
        train_domains=domains,
        max_docs_per_domain=args.max_docs_per_domain,
        layers=args.layers,
        width=args.width,
        heads=args.heads,
        vocab_size=args.vocab_size,
        context=args.context,
        dropout=args.dropout,
        reversible=args.reversible,
        grow_at=tuple(args.grow_at),
        steps=args.steps,
        minutes=args.minutes,
        stop_step=args.stop_step,
        batch_size=args.batch_size,
        lr=args.lr,
        warmup_steps=args.warmup_steps,
        device=args.device,
        threads=args.threads,
        seed=args.seed,
        eval_tokens=args.eval_tokens,
        save_dtype=args.save_dtype,
        force=args.force,
        progress=not args.no_progress,
        command="worx " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
    )
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)  # clean up the partial output on SIGTERM
    try:
        report = pretrain(cfg)
    except (ValueError, FileNotFoundError, FileExistsError, FloatingPointError) as exc:
        print(f"worx trunk pretrain: {exc}", file=sys.stderr)
        return 2
    print(f"trunk written to {Path(args.out).resolve()}")
    _print_figures(report)
    return 0


def _growth_spec(text: str) -> str:
    """``--grow-at``'s value, checked for form (the shapes are checked against each other
    and the starting shape when the run is set up)."""
    from trainer.trunk_growth import GrowthError, parse_growth

    try:
        parse_growth(text)
    except GrowthError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    return text


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run_info(args: argparse.Namespace) -> int:
    target = Path(args.dir) if args.dir else _configured_trunk(args.config)
    info = describe_trunk(target)  # a TrunkError is a user error: one line, exit 2
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(f"trunk     {info['path']}")
    print(
        f"model     {info['model_type']}, {info['layers']} layers, width {info['width']}, "
        f"context {info['context']}, vocab {info['vocab_size']}"
    )
    print(
        f"weights   {info['parameters']:,} parameters, {info['weights_mb']:.1f} MB "
        f"({', '.join(info['dtypes'])})"
    )
    print(f"tokenizer {'yes' if info['tokenizer'] else 'MISSING'}")
    if info.get("report"):
        _print_figures(info["report"])
    return 0


def _configured_trunk(config_path: str | None) -> Path:
    from experts.default_trunk import default_trunk_dir
    from topology.composition.worx_config import load_config

    trunk_dir = getattr(load_config(config_path).experts, "trunk_dir", "")
    return Path(trunk_dir) if trunk_dir else default_trunk_dir()


def describe_trunk(path: Path) -> dict:
    """Figures of a Hugging Face trunk directory, read from JSON and safetensors headers.

    Raises
    ------
    experts.trunk.TrunkError
        If ``path`` does not exist, or has no ``config.json`` or no ``*.safetensors`` weights.
    """
    from safetensors import safe_open

    from experts.trunk import TrunkError
    from trainer.pretrain_card import REPORT_NAME

    if not path.exists():
        raise TrunkError(f"trunk directory {path} does not exist")
    if not path.is_dir():
        raise TrunkError(f"trunk {path} is a file, not a model directory")
    config_path = path / "config.json"
    if not config_path.is_file():
        raise TrunkError(f"trunk {path} has no config.json: not a Hugging Face model directory")
    config = json.loads(config_path.read_text(encoding="utf-8"))
    weights = sorted(path.glob("*.safetensors"))
    if not weights:
        raise TrunkError(f"trunk {path} has no *.safetensors weights")
    n_params, dtypes = 0, set()
    for file in weights:
        with safe_open(str(file), framework="pt") as handle:
            for name in handle.keys():
                sl = handle.get_slice(name)
                numel = 1
                for dim in sl.get_shape():
                    numel *= dim
                n_params += numel
                dtypes.add(str(sl.get_dtype()))
    report_path = path / REPORT_NAME
    return {
        "path": str(path.resolve()),
        "model_type": config.get("model_type", "?"),
        "layers": config.get("n_layer", config.get("num_hidden_layers")),
        "width": config.get("n_embd", config.get("hidden_size")),
        "context": config.get("n_positions", config.get("max_position_embeddings")),
        "vocab_size": config.get("vocab_size"),
        "parameters": n_params,
        "dtypes": sorted(dtypes),
        "weights_mb": sum(f.stat().st_size for f in weights) / 1e6,
        "tokenizer": (path / "tokenizer.json").is_file(),
        "report": json.loads(report_path.read_text(encoding="utf-8"))
        if report_path.is_file()
        else None,
    }


def _print_figures(report: dict) -> None:
    print(
        f"training  {report['steps']:,} steps, {report['tokens_seen']:,} tokens "
        f"({report['epochs']} epochs) on {', '.join(report['train_domains'])}, "
        f"{report['train_s']:.0f} s on {report['device']}"
    )
    print(f"loss      {report['initial_loss']:.3f} -> {report['final_loss']:.3f}")
    print("held-out perplexity:")
    for domain, row in sorted(report["heldout"].items()):
        mark = "*" if row["trained_on"] else " "
        print(f"  {mark} {domain:<16} {row['ppl']:>10.1f}")
    print("  (* trained on)")
