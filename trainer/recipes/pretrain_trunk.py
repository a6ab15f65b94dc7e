"""Recipe: pretrain the default trunk, a small GPT-2-style causal LM, from scratch.

setup -> train -> evaluate -> save. The tokenizer is a byte-level BPE trained on the
training part of every bundled domain; the model is trained on general English only
(``fiction_austen`` and ``news`` by default); a deterministic slice of every domain is held
out (hash of the document id) and reported as per-domain perplexity in ``MODEL_CARD.md``.

The output is a plain Hugging Face model directory (``config.json``, ``model.safetensors``,
tokenizer files), loadable with ``AutoModelForCausalLM.from_pretrained`` like any user's
trunk, plus ``MODEL_CARD.md`` and ``pretrain_report.json``.

Two ways to say how long to train. ``steps``: the cosine schedule runs over that many
steps, and the run is reproducible step for step (``minutes``, if also given, is only a
hard stop). ``minutes`` alone: the schedule runs over wall-clock time, so the learning rate
has decayed when the budget ends however busy the machine is; the card then gives the
step-based command of the same length, which redoes the recipe but not bit for bit.

Options: ``reversible`` trains a reversible trunk (:mod:`experts.reversible`: activations
recomputed from outputs in backward, so their memory does not grow with depth);
``grow_at`` grows the trunk mid-training, function-preservingly (:mod:`trainer.trunk_growth`),
measuring the loss of a fixed probe batch right before and right after each growth.

The parts: settings in :mod:`trainer.pretrain_config`, data in :mod:`trainer.pretrain_data`,
report and card in :mod:`trainer.pretrain_card`; the schedule is :func:`trainer.schedule.lr_at`
and the autocast :func:`trainer.precision.autocast_for`, as in the other recipes.
"""

from __future__ import annotations

import json
import logging
import math
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from trainer.lm_eval import evaluate_domains
from trainer.precision import autocast_for
from trainer.pretrain_card import CARD_NAME, REPORT_NAME, model_card, reproduce_command, versions
from trainer.pretrain_config import DTYPES, PretrainConfig, warmup_steps
from trainer.pretrain_data import HOLDOUT_SALT, Batches, Corpus, load_corpus, token_stream
from trainer.schedule import lr_at
from trainer.trunk_growth import grow, plan_growth

logger = logging.getLogger(__name__)

__all__ = ["CARD_NAME", "REPORT_NAME", "PretrainConfig", "pretrain", "schedule_lr"]


def schedule_lr(step: int, total: int, cfg: PretrainConfig, progress: float | None = None) -> float:
    """The learning rate of step ``step`` of ``total``: :func:`trainer.schedule.lr_at` with
    this recipe's settings (``progress`` in [0, 1] overrides the position, time budgets)."""
    return lr_at(
        step,
        base_lr=cfg.lr,
        total_steps=total,
        warmup_steps=warmup_steps(cfg),
        min_ratio=cfg.min_lr_ratio,
        progress=progress,
    )


@dataclass
class _Setup:
    """What the setup step hands to training: the tokenizer and the token streams."""

    corpus: Corpus
    tokenizer: Any
    train_texts: list[str]
    train_stream: torch.Tensor  # (N,) token ids of the training domains
    heldout: dict[str, torch.Tensor]  # domain -> (M,) held-out token ids
    setup_s: float


@dataclass
class _Trained:
    """What the training loop hands to evaluation and the report."""

    model: torch.nn.Module  # the trained model (a new object after a widening)
    losses: list[float]
    growth: list[dict[str, Any]]  # one entry per growth: shapes, loss before and after
    step: int  # optimizer steps taken
    total: int  # planned steps (the step-based rerun's length)
    stopped_by: str
    by_time: bool  # the schedule ran over wall-clock time
    train_s: float


def pretrain(
    cfg: PretrainConfig, on_step: Callable[[int, float], None] | None = None
) -> dict[str, Any]:
    """Run the recipe and write the trunk directory to ``cfg.out_dir``.

    Parameters
    ----------
    cfg
        The run's settings (validated here).
    on_step
        Called as ``on_step(step, loss)`` after every optimizer step (tests, dashboards).

    Returns
    -------
    dict
        The report also written to ``pretrain_report.json``.

    Raises
    ------
    ValueError, FileNotFoundError, FileExistsError
        For bad settings, a missing corpus or training domain, or an occupied ``out_dir``.
    """
    from worx.bundled import corpus_dir as bundled_corpus_dir

    cfg.validate()
    out = Path(cfg.out_dir).expanduser().resolve()
    _prepare_out_dir(out, cfg.force)
    device = _device(cfg)
    started = time.monotonic()
    corpus_dir = Path(cfg.corpus_dir) if cfg.corpus_dir else bundled_corpus_dir()
    corpus = load_corpus(corpus_dir, cfg.holdout_fraction, cfg.max_docs_per_domain)
    missing = [d for d in cfg.train_domains if d not in corpus.train]
    if missing:
        raise ValueError(
            f"training domain(s) {missing} not in {corpus_dir} (have {sorted(corpus.train)})"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        setup = _setup(cfg, corpus, tmp, started)
        model = _build_model(cfg, setup.tokenizer, device)
        trained = _train(cfg, model, setup.train_stream, device, on_step)
        model = trained.model
        per_domain = evaluate_domains(
            model, setup.heldout, cfg.context, max(1, cfg.batch_size), device, cfg.eval_tokens
        )
        for domain, row in per_domain.items():
            row["trained_on"] = domain in cfg.train_domains
        report = _save(cfg, model, setup, trained, per_domain, device, tmp)
        _install(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    logger.info(
        "trunk written to %s (final loss %.3f, %d steps)", out, report["final_loss"], trained.step
    )
    return report


def _device(cfg: PretrainConfig) -> torch.device:
    """The run's device, threads and seed, set up (raises ValueError for a missing GPU)."""
    device = torch.device(cfg.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device cuda requested but torch sees no GPU; use --device cpu")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return device


def _setup(cfg: PretrainConfig, corpus: Corpus, tmp: Path, started: float) -> _Setup:
    """Train the tokenizer (into ``tmp``) and tokenize the training and held-out text."""
    from experts.tokenizer import train_bpe_tokenizer

    all_train = [t for domain in sorted(corpus.train) for t in corpus.train[domain]]
    logger.info(
        "training tokenizer on %d documents of %d domains", len(all_train), len(corpus.train)
    )
    tokenizer = train_bpe_tokenizer(all_train, cfg.vocab_size, tmp)
    train_texts = [t for d in cfg.train_domains for t in corpus.train[d]]
    train_stream = token_stream(tokenizer, train_texts)  # (N,)
    if train_stream.numel() <= cfg.context:
        raise ValueError(
            f"only {train_stream.numel()} training tokens: need more than context "
            f"{cfg.context}; add text or lower --context"
        )
    heldout = {d: token_stream(tokenizer, texts) for d, texts in corpus.heldout.items() if texts}
    return _Setup(corpus, tokenizer, train_texts, train_stream, heldout, time.monotonic() - started)


def _build_model(cfg: PretrainConfig, tokenizer: Any, device: torch.device) -> torch.nn.Module:
    """A freshly initialised GPT-2 LM, or its reversible variant (tied embeddings both), on
    ``device``, in train mode."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from experts.reversible import ReversibleConfig, ReversibleLMHeadModel

    shape = dict(
        vocab_size=len(tokenizer),
        n_positions=cfg.context,
        n_embd=cfg.width,
        n_layer=cfg.layers,
        n_head=cfg.n_heads,
        resid_pdrop=cfg.dropout,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
    )
    if cfg.reversible:
        model = ReversibleLMHeadModel(ReversibleConfig(**shape))
    else:
        model = GPT2LMHeadModel(GPT2Config(**shape, embd_pdrop=cfg.dropout, attn_pdrop=cfg.dropout))
    model = model.to(device)
    model.train()
    logger.info(
        "model: %s%d layers, width %d, %d heads, vocab %d, %.2fM parameters",
        "reversible, " if cfg.reversible else "",
        cfg.layers,
        cfg.width,
        cfg.n_heads,
        len(tokenizer),
        sum(p.numel() for p in model.parameters()) / 1e6,
    )
    return model


def _train(
    cfg: PretrainConfig,
    model: torch.nn.Module,
    train_stream: torch.Tensor,
    device: torch.device,
    on_step: Callable[[int, float], None] | None,
) -> _Trained:
    """AdamW over seeded random windows of ``train_stream`` until the steps or the time
    budget run out (or ``stop_step``)."""

    def make_optimizer(model: torch.nn.Module) -> torch.optim.Optimizer:
        return torch.optim.AdamW(
            _param_groups(model, cfg.weight_decay),
            lr=cfg.lr,
            betas=(0.9, 0.95),
            eps=1e-8,
            **({"fused": True} if device.type == "cuda" else {}),
        )

    optimizer = make_optimizer(model)
    generator = torch.Generator().manual_seed(cfg.seed)
    batches = iter(Batches(train_stream, cfg.context, cfg.batch_size, device, generator))
    growths = plan_growth(cfg.grow_at, cfg.layers, cfg.width, cfg.steps)
    grown: list[dict[str, Any]] = []
    probe = None  # the fixed batch the loss is measured on around each growth
    if growths:
        probe_gen = torch.Generator().manual_seed(cfg.seed + 1)
        probe = next(iter(Batches(train_stream, cfg.context, cfg.batch_size, device, probe_gen)))
    budget_s = cfg.minutes * 60.0
    by_time = not cfg.steps  # schedule over wall-clock time
    total = cfg.steps or 10**12
    warmup_end_s = 0.0  # when the warm-up ended (time-based decay starts there)
    losses: list[float] = []
    bar = tqdm(
        total=cfg.steps or None,
        desc="pretrain trunk",
        unit="step",
        disable=not cfg.progress,
        dynamic_ncols=True,
    )
    train_started = time.monotonic()
    stopped_by = "steps"
    step = 0
    while step < total and not (cfg.stop_step and step >= cfg.stop_step):
        elapsed = time.monotonic() - train_started
        if budget_s and elapsed >= budget_s:
            stopped_by = "time budget"
            break
        progress = None
        if by_time:
            if step == warmup_steps(cfg):
                warmup_end_s = elapsed
            progress = (elapsed - warmup_end_s) / max(1e-9, budget_s - warmup_end_s)
        if growths and step == growths[0].step:
            before = _probe_loss(model, probe, device)
            model, optimizer, event = grow(
                model, optimizer, growths.pop(0), make_optimizer, seed=cfg.seed
            )
            after = _probe_loss(model, probe, device)
            grown.append({**event, "loss_before": before, "loss_after": after})
            logger.info("grew at step %d: loss %.6f -> %.6f", step, before, after)
        lr = schedule_lr(step, total, cfg, progress)
        for group in optimizer.param_groups:
            group["lr"] = lr
        x = next(batches)  # (B, T)
        with autocast_for(device):
            loss = model(input_ids=x, attention_mask=torch.ones_like(x), labels=x).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        value = float(loss.detach())
        if not math.isfinite(value):
            raise FloatingPointError(f"loss became {value} at step {step}; lower --lr")
        losses.append(value)
        step += 1
        if on_step is not None:
            on_step(step, value)
        bar.update(1)
        if step % 10 == 0 or step == total:
            tok_s = step * x.numel() / max(1e-9, time.monotonic() - train_started)
            bar.set_postfix(loss=f"{value:.3f}", lr=f"{lr:.1e}", tok_s=f"{tok_s:.0f}")
    bar.close()
    train_s = time.monotonic() - train_started
    if not losses:
        raise ValueError("no optimizer step ran: raise --minutes or --steps")
    if cfg.stop_step and step >= cfg.stop_step and step < total:
        stopped_by = "stop_step"
    if by_time:
        total = step  # the step-based rerun of the same length
    return _Trained(model, losses, grown, step, total, stopped_by, by_time, train_s)


@torch.no_grad()
def _probe_loss(model: torch.nn.Module, x: torch.Tensor, device: torch.device) -> float:
    """The loss of ``model`` on the batch ``x`` (B, T), without dropout."""
    model.eval()
    with autocast_for(device):
        loss = model(input_ids=x, attention_mask=torch.ones_like(x), labels=x).loss
    model.train()
    return float(loss)


def _save(
    cfg: PretrainConfig,
    model: torch.nn.Module,
    setup: _Setup,
    trained: _Trained,
    per_domain: dict[str, dict[str, Any]],
    device: torch.device,
    tmp: Path,
) -> dict[str, Any]:
    """Write the model, the report and the card into ``tmp``; returns the report."""
    n_params = sum(p.numel() for p in model.parameters())
    save_dtype = _choose_save_dtype(cfg, n_params)
    model = model.to("cpu", dtype=DTYPES[save_dtype])
    model.config.use_cache = True
    model.save_pretrained(str(tmp))
    losses, step, total = trained.losses, trained.step, trained.total
    tail = losses[-min(len(losses), 20) :]
    tokens_seen = step * cfg.batch_size * cfg.context
    n_train_tokens = int(setup.train_stream.numel())
    report = {
        "schema_version": 1,
        "architecture": type(model).__name__,
        "layers": model.config.n_layer,
        "width": model.config.n_embd,
        "heads": model.config.n_head,
        "growth": trained.growth,
        "context": cfg.context,
        "vocab_size": len(setup.tokenizer),
        "parameters": n_params,
        "save_dtype": save_dtype,
        "weights_bytes": (tmp / "model.safetensors").stat().st_size,
        "train_domains": list(cfg.train_domains),
        "tokenizer_domains": sorted(setup.corpus.train),
        "train_documents": len(setup.train_texts),
        "train_tokens": n_train_tokens,
        "heldout_rule": f"sha256('{HOLDOUT_SALT}' + id) as a fraction < {cfg.holdout_fraction}",
        "steps": step,
        "planned_steps": total,
        "schedule": "time" if trained.by_time else "steps",
        "stopped_by": trained.stopped_by,
        "batch_size": cfg.batch_size,
        "tokens_seen": tokens_seen,
        "epochs": round(tokens_seen / max(1, n_train_tokens), 2),
        "initial_loss": round(losses[0], 4),
        "final_loss": round(sum(tail) / len(tail), 4),
        "heldout": per_domain,
        "lr": cfg.lr,
        "warmup_steps": warmup_steps(cfg),
        "weight_decay": cfg.weight_decay,
        "dropout": cfg.dropout,
        "seed": cfg.seed,
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
        "setup_s": round(setup.setup_s, 1),
        "train_s": round(trained.train_s, 1),
        "tokens_per_s": round(tokens_seen / max(1e-9, trained.train_s)),
        "versions": versions(),
        "command": cfg.command,
        "reproduce": reproduce_command(cfg, step, total),
        "config": {k: v for k, v in asdict(cfg).items() if k not in ("command",)},
    }
    (tmp / REPORT_NAME).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (tmp / CARD_NAME).write_text(model_card(report), encoding="utf-8")
    return report


def _param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    decay, no_decay = [], []
    for param in model.parameters():  # tied embedding appears once
        (decay if param.dim() >= 2 else no_decay).append(param)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def _choose_save_dtype(cfg: PretrainConfig, n_params: int) -> str:
    if cfg.save_dtype != "auto":
        return cfg.save_dtype
    return "float32" if n_params * 4 <= cfg.max_weight_bytes else "float16"


def _prepare_out_dir(out: Path, force: bool) -> None:
    if out.exists() and any(out.iterdir()):
        if not force:
            raise FileExistsError(
                f"{out} exists and is not empty; pass --force to replace the trunk there "
                "or choose another --out"
            )
        if not (out / "config.json").is_file():
            raise FileExistsError(
                f"{out} is not empty and holds no config.json, so it does not look like a "
                "trunk directory; refusing to replace it even with --force"
            )


def _install(tmp: Path, out: Path) -> None:
    """Move the finished directory ``tmp`` to ``out`` (replacing an old trunk there)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.replace(out, old)
    tmp.chmod(0o755)
    for file in tmp.iterdir():
        file.chmod(0o644)
    os.replace(tmp, out)
    if old is not None:
        shutil.rmtree(old)
