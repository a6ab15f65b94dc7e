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
"""

from __future__ import annotations

import gzip
import json
import logging
import math
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from worx.ids import stable_fraction

logger = logging.getLogger(__name__)

REPORT_NAME = "pretrain_report.json"
CARD_NAME = "MODEL_CARD.md"
HOLDOUT_SALT = "worx-trunk-holdout:"
# Weights larger than this in float32 are saved in float16 (the committed trunk's limit).
DEFAULT_MAX_WEIGHT_BYTES = 20 * 1024 * 1024


@dataclass(frozen=True)
class PretrainConfig:
    out_dir: str  # where the model directory is written
    corpus_dir: str = ""  # folder of <domain>.jsonl.gz; empty: the bundled data/corpus
    train_domains: tuple[str, ...] = ("fiction_austen", "news")  # model training text
    holdout_fraction: float = 0.05  # share of each domain's documents held out (by id hash)
    max_docs_per_domain: int = 0  # cap per domain after the split (0: all); for tests
    # model (GPT-2 architecture, tied input/output embeddings)
    layers: int = 4  # transformer blocks
    width: int = 256  # hidden size d_model
    heads: int = 0  # attention heads; 0: width // 64 (at least 1)
    vocab_size: int = 8192  # BPE vocabulary target (trained on all domains)
    context: int = 256  # tokens per training sequence and max positions
    dropout: float = 0.0  # residual/embedding/attention dropout
    # optimisation
    steps: int = 0  # total optimizer steps (schedule length); 0: from `minutes`
    minutes: float = 0.0  # training time budget; 0: no budget (needs `steps`)
    stop_step: int = 0  # stop after this many steps of the schedule (0: run it all)
    batch_size: int = 16  # sequences per step
    lr: float = 1e-3  # peak AdamW learning rate
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio
    warmup_steps: int = 0  # linear warm-up steps; 0: a tenth of `steps`, at most 100
    weight_decay: float = 0.1  # AdamW decay on matrices only
    grad_clip: float = 1.0  # max global gradient norm (0: off)
    # runtime
    device: str = "cpu"  # cpu | cuda | cuda:N; cuda uses bf16 autocast
    threads: int = 0  # CPU threads for torch (0: torch default)
    seed: int = 0  # seeds the model init, the tokenizer-independent batch order
    eval_tokens: int = 65_536  # held-out tokens evaluated per domain at most
    save_dtype: str = "auto"  # auto | float32 | float16 | bfloat16
    max_weight_bytes: int = DEFAULT_MAX_WEIGHT_BYTES  # `auto` saves float16 above this
    force: bool = False  # replace an existing trunk directory at out_dir
    progress: bool = True  # show a progress bar
    command: str = ""  # the command line that launched this run (for the card)

    def validate(self) -> None:
        """Raise ValueError with the fix when a field is out of range."""
        if self.steps <= 0 and self.minutes <= 0:
            raise ValueError("give a step count (--steps N) or a time budget (--minutes M)")
        if self.steps < 0 or self.minutes < 0 or self.stop_step < 0:
            raise ValueError("steps, minutes and stop_step must be >= 0")
        if not 0.0 < self.holdout_fraction < 1.0:
            raise ValueError("holdout_fraction must be in (0, 1), e.g. 0.05")
        if not self.train_domains:
            raise ValueError("train_domains is empty: name at least one domain to train on")
        if self.layers < 1 or self.width < 1 or self.context < 2 or self.batch_size < 1:
            raise ValueError("layers, width, batch_size must be >= 1 and context >= 2")
        if self.warmup_steps < 0:
            raise ValueError("warmup_steps must be >= 0 (0: automatic)")
        if self.steps and self.warmup_steps and self.warmup_steps >= self.steps:
            raise ValueError(
                f"warmup_steps {self.warmup_steps} must be below steps {self.steps}; "
                "lower --warmup-steps"
            )
        if self.width % self.n_heads:
            raise ValueError(f"width {self.width} is not divisible by heads {self.n_heads}")
        if self.vocab_size < 257:
            raise ValueError("vocab_size must be >= 257 (256 bytes + <|endoftext|>)")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError("dropout must be in [0, 1)")
        if self.save_dtype not in _DTYPES and self.save_dtype != "auto":
            raise ValueError(f"save_dtype must be auto or one of {sorted(_DTYPES)}")
        if not (self.device == "cpu" or self.device.startswith("cuda")):
            raise ValueError(f"device {self.device!r}: use cpu, cuda or cuda:N")

    @property
    def n_heads(self) -> int:
        return self.heads or max(1, self.width // 64)


_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass
class Corpus:
    """Documents of every domain, split by a stable hash of the document id."""

    train: dict[str, list[str]] = field(default_factory=dict)  # domain -> texts
    heldout: dict[str, list[str]] = field(default_factory=dict)  # domain -> texts


def is_heldout(doc_id: str, fraction: float = 0.05) -> bool:
    """Whether the trunk recipe holds document ``doc_id`` out of training (stable hash)."""
    return stable_fraction(doc_id, salt=HOLDOUT_SALT) < fraction


def load_corpus(corpus_dir: Path, holdout_fraction: float, max_docs: int = 0) -> Corpus:
    """Read every ``<domain>.jsonl.gz`` in ``corpus_dir`` and split it train/held-out.

    Raises
    ------
    FileNotFoundError
        If the folder holds no ``*.jsonl.gz``.
    ValueError
        If a line is not a JSON object with string ``id`` and ``text``.
    """
    files = sorted(corpus_dir.glob("*.jsonl.gz"))
    if not files:
        raise FileNotFoundError(f"no *.jsonl.gz corpus files in {corpus_dir}")
    corpus = Corpus()
    for path in files:
        domain = path.name.removesuffix(".jsonl.gz")
        train, heldout = [], []
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            for line_no, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    doc_id, text = row["id"], row["text"]
                except (json.JSONDecodeError, KeyError, TypeError) as exc:
                    raise ValueError(f"{path}:{line_no}: not a corpus line ({exc})") from exc
                if not isinstance(doc_id, str) or not isinstance(text, str):
                    raise ValueError(f"{path}:{line_no}: id and text must be strings")
                (heldout if is_heldout(doc_id, holdout_fraction) else train).append(text)
        if max_docs:
            train, heldout = train[:max_docs], heldout[: max(1, max_docs // 4)]
        corpus.train[domain], corpus.heldout[domain] = train, heldout
    return corpus


def token_stream(tokenizer: Any, texts: list[str]) -> torch.Tensor:
    """Tokenize ``texts`` into one stream, each document followed by ``<|endoftext|>``."""
    eos = tokenizer.eos_token_id
    ids: list[int] = []
    for start in range(0, len(texts), 256):
        for doc in tokenizer(texts[start : start + 256])["input_ids"]:
            ids.extend(doc)
            ids.append(eos)
    return torch.tensor(ids, dtype=torch.long)  # (N,)


def lr_at(step: int, total: int, cfg: PretrainConfig, progress: float | None = None) -> float:
    """Linear warm-up then cosine decay to ``lr * min_lr_ratio`` (step counted from 0).

    ``progress`` in [0, 1] overrides the step-based position in the decay (time budgets).
    """
    warmup = warmup_steps(cfg)
    if step < warmup:
        return cfg.lr * (step + 1) / warmup
    if progress is None:
        progress = (step - warmup) / max(1, total - warmup)
    progress = min(1.0, max(0.0, progress))
    floor = cfg.lr * cfg.min_lr_ratio
    return floor + 0.5 * (cfg.lr - floor) * (1.0 + math.cos(math.pi * progress))


def warmup_steps(cfg: PretrainConfig) -> int:
    """The configured warm-up, or (0) a tenth of ``steps`` capped at 100 (100 for budgets)."""
    if cfg.warmup_steps:
        return cfg.warmup_steps
    return max(1, min(100, cfg.steps // 10)) if cfg.steps else 100


@dataclass
class _Batches:
    """Random windows of ``context`` tokens from one stream, in a seeded order."""

    stream: torch.Tensor  # (N,) token ids
    context: int
    batch_size: int
    device: torch.device
    generator: torch.Generator

    def __iter__(self) -> Iterator[torch.Tensor]:
        span = self.stream.numel() - self.context
        offsets = torch.arange(self.context)  # (T,)
        pin = self.device.type == "cuda"
        while True:
            starts = torch.randint(0, span + 1, (self.batch_size,), generator=self.generator)
            batch = self.stream[starts[:, None] + offsets[None, :]]  # (B, T)
            if pin:
                batch = batch.pin_memory()
            yield batch.to(self.device, non_blocking=True)


def _autocast(device: torch.device):
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return nullcontext()


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    stream: torch.Tensor,
    context: int,
    batch_size: int,
    device: torch.device,
    max_tokens: int,
) -> tuple[float, int]:
    """Mean next-token loss over non-overlapping windows of ``stream``; (loss, tokens)."""
    model.eval()
    n_windows = min(stream.numel() // context, max(1, max_tokens // context))
    if n_windows == 0:  # a stream shorter than one window: evaluate it whole
        windows = stream[None, :]  # (1, N)
    else:
        windows = stream[: n_windows * context].view(n_windows, context)  # (W, T)
    total_loss, total_tokens = 0.0, 0
    for start in range(0, windows.shape[0], batch_size):
        x = windows[start : start + batch_size].to(device)  # (b, T)
        with _autocast(device):
            logits = model(input_ids=x, attention_mask=torch.ones_like(x)).logits  # (b, T, V)
        loss = torch.nn.functional.cross_entropy(
            logits[:, :-1].float().reshape(-1, logits.shape[-1]),  # (b*(T-1), V)
            x[:, 1:].reshape(-1),  # (b*(T-1),)
            reduction="sum",
        )
        total_loss += float(loss)
        total_tokens += x[:, 1:].numel()
    model.train()
    return total_loss / max(1, total_tokens), total_tokens


def _param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    decay, no_decay = [], []
    for param in model.parameters():  # tied embedding appears once
        (decay if param.dim() >= 2 else no_decay).append(param)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


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
    from transformers import GPT2Config, GPT2LMHeadModel

    from experts.default_trunk import default_corpus_dir
    from experts.tokenizer import train_bpe_tokenizer

    cfg.validate()
    out = Path(cfg.out_dir).expanduser().resolve()
    _prepare_out_dir(out, cfg.force)
    device = torch.device(cfg.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device cuda requested but torch sees no GPU; use --device cpu")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    # ---- setup: corpus, tokenizer, streams -------------------------------------------
    started = time.monotonic()
    corpus_dir = Path(cfg.corpus_dir) if cfg.corpus_dir else default_corpus_dir()
    corpus = load_corpus(corpus_dir, cfg.holdout_fraction, cfg.max_docs_per_domain)
    missing = [d for d in cfg.train_domains if d not in corpus.train]
    if missing:
        raise ValueError(
            f"training domain(s) {missing} not in {corpus_dir} (have {sorted(corpus.train)})"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
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
        heldout = {
            d: token_stream(tokenizer, texts) for d, texts in corpus.heldout.items() if texts
        }
        setup_s = time.monotonic() - started

        model_config = GPT2Config(
            vocab_size=len(tokenizer),
            n_positions=cfg.context,
            n_embd=cfg.width,
            n_layer=cfg.layers,
            n_head=cfg.n_heads,
            resid_pdrop=cfg.dropout,
            embd_pdrop=cfg.dropout,
            attn_pdrop=cfg.dropout,
            bos_token_id=tokenizer.eos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.eos_token_id,
            tie_word_embeddings=True,
        )
        model = GPT2LMHeadModel(model_config).to(device)
        model.train()
        n_params = sum(p.numel() for p in model.parameters())
        logger.info(
            "model: %d layers, width %d, %d heads, vocab %d, %.2fM parameters",
            cfg.layers,
            cfg.width,
            cfg.n_heads,
            len(tokenizer),
            n_params / 1e6,
        )

        # ---- train -----------------------------------------------------------------
        optimizer = torch.optim.AdamW(
            _param_groups(model, cfg.weight_decay),
            lr=cfg.lr,
            betas=(0.9, 0.95),
            eps=1e-8,
            **({"fused": True} if device.type == "cuda" else {}),
        )
        generator = torch.Generator().manual_seed(cfg.seed)
        batches = iter(_Batches(train_stream, cfg.context, cfg.batch_size, device, generator))
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
            lr = lr_at(step, total, cfg, progress)
            for group in optimizer.param_groups:
                group["lr"] = lr
            x = next(batches)  # (B, T)
            with _autocast(device):
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

        # ---- evaluate ---------------------------------------------------------------
        eval_bs = max(1, cfg.batch_size)
        per_domain = {}
        for domain, stream in sorted(heldout.items()):
            loss, n_tok = evaluate(model, stream, cfg.context, eval_bs, device, cfg.eval_tokens)
            per_domain[domain] = {
                "loss": round(loss, 4),
                "ppl": round(math.exp(loss), 2),
                "tokens": n_tok,
                "trained_on": domain in cfg.train_domains,
            }

        # ---- save -------------------------------------------------------------------
        save_dtype = _choose_save_dtype(cfg, n_params)
        model = model.to("cpu", dtype=_DTYPES[save_dtype])
        model.config.use_cache = True
        model.save_pretrained(str(tmp))
        tail = losses[-min(len(losses), 20) :]
        tokens_seen = step * cfg.batch_size * cfg.context
        report = {
            "schema_version": 1,
            "architecture": "GPT2LMHeadModel",
            "layers": cfg.layers,
            "width": cfg.width,
            "heads": cfg.n_heads,
            "context": cfg.context,
            "vocab_size": len(tokenizer),
            "parameters": n_params,
            "save_dtype": save_dtype,
            "weights_bytes": (tmp / "model.safetensors").stat().st_size,
            "train_domains": list(cfg.train_domains),
            "tokenizer_domains": sorted(corpus.train),
            "train_documents": len(train_texts),
            "train_tokens": int(train_stream.numel()),
            "heldout_rule": f"sha256('{HOLDOUT_SALT}' + id) as a fraction < {cfg.holdout_fraction}",
            "steps": step,
            "planned_steps": total,
            "schedule": "time" if by_time else "steps",
            "stopped_by": stopped_by,
            "batch_size": cfg.batch_size,
            "tokens_seen": tokens_seen,
            "epochs": round(tokens_seen / max(1, train_stream.numel()), 2),
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
            "setup_s": round(setup_s, 1),
            "train_s": round(train_s, 1),
            "tokens_per_s": round(tokens_seen / max(1e-9, train_s)),
            "versions": _versions(),
            "command": cfg.command,
            "reproduce": reproduce_command(cfg, step, total),
            "config": {k: v for k, v in asdict(cfg).items() if k not in ("command",)},
        }
        (tmp / REPORT_NAME).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        (tmp / CARD_NAME).write_text(model_card(report), encoding="utf-8")
        _install(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    logger.info("trunk written to %s (final loss %.3f, %d steps)", out, report["final_loss"], step)
    return report


def _choose_save_dtype(cfg: PretrainConfig, n_params: int) -> str:
    if cfg.save_dtype != "auto":
        return cfg.save_dtype
    return "float32" if n_params * 4 <= cfg.max_weight_bytes else "float16"


def _versions() -> dict[str, str]:
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
recipe (`trainer/pretrain_trunk.py`), for use as the frozen trunk under the experts.
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
