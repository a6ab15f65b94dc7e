"""Composition roots: the server, the monitor and the trainer's parts, built from config.

Every directory comes from :mod:`topology.composition.paths`, so the commands agree on where the
trunk, the store, the jobs and the state live. Heavy imports (torch, the model) happen
inside the functions, to keep ``worx --help`` instant.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from monitor.domains import KnownDomains
from monitor.heldout import HeldoutSets
from monitor.history import MatrixHistory
from monitor.labels import DomainLabels
from monitor.live import LiveState
from monitor.stage import MonitorStage
from topology.composition import expert_store, paths

if TYPE_CHECKING:
    from topology.composition.worx_config import WorxConfig
    from trainer.config import TrainerConfig

log = logging.getLogger(__name__)


# ---- serve ------------------------------------------------------------------------------
def server_from_config(
    config: WorxConfig, trunk_dir: str | None = None, store_dir: str | None = None
):
    """Load the trunk, open the store, build embedder and gate as ``config`` says.

    The server's domain table starts empty: the caller follows ``worx.domains`` into
    ``server.domains`` (``worx serve`` does).
    """
    import torch

    from experts.likelihood_routing import likelihood_router
    from experts.serving import ExpertServer
    from experts.trunk import load_trunk
    from router.embed import default_embedder
    from router.gate import Gate

    section = config.experts
    if store_dir and not section.store_url:  # named on the command line: it must exist
        paths.existing_dir(paths.store_dir(config, store_dir), "expert store", paths.STORE_HINT)
    trunk = load_trunk(
        paths.trunk_dir(config, trunk_dir), dtype=getattr(torch, section.trunk_dtype)
    )
    store = expert_store.open_configured_store(
        config,
        "serve",
        trunk.fingerprint,
        store_dir,
        lru_budget_bytes=section.lru_budget_mb << 20,
        create=False,  # the server only reads: until the trainer writes it, it looks empty
    )
    gate = Gate(section.gate_top_k, section.gate_temperature)
    return ExpertServer(
        trunk,
        store,
        default_embedder(config.router),
        gate,
        max_tokens=section.max_tokens,
        max_new_tokens=section.max_new_tokens,
        likelihood=likelihood_router(section),
        batching=batching_from_config(config.serve),
    )


def batching_from_config(serve: Any):
    """The server's :class:`experts.serving.Batching` from ``[serve]``; None without
    batching."""
    from experts.serving import Batching

    if not serve.batching:
        return None
    return Batching(
        serve.batch_window_ms / 1000.0,
        serve.batch_max_rows,
        serve.batch_forward_threads,
        serve.batch_max_tokens,
    )


# ---- trainer ----------------------------------------------------------------------------
@dataclasses.dataclass
class TrainerParts:
    """What ``worx trainer`` runs with: its section (overrides applied), trunk, store, dirs."""

    config: TrainerConfig  # the [trainer] section, overrides applied
    trunk: Any
    store: Any
    trunk_dir: Path
    store_dir: Path
    jobs_dir: Path


def trainer_from_config(
    config: WorxConfig,
    trunk_dir: str | None = None,
    store_dir: str | None = None,
    jobs_dir: str | None = None,
    device: str | None = None,
    progress: bool | None = None,
) -> TrainerParts:
    """The trainer's trunk (on its device, in its dtype), store and job directory.

    Raises:
        ConfigError: ``trainer.device`` names CUDA and there is none.
    """
    import torch

    from experts.trunk import load_trunk
    from topology.composition.worx_config import ConfigError
    from trainer.expert_setup import resolve_device

    section = config.trainer
    if device:
        section = dataclasses.replace(section, device=device)
    if progress is not None:
        section = dataclasses.replace(section, progress=progress)
    resolved = resolve_device(section)
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"trainer.device is {section.device!r} but no CUDA device is available")
    dtype = torch.bfloat16 if resolved.type == "cuda" and section.bf16 else torch.float32
    trunk_path = paths.trunk_dir(config, trunk_dir)
    if section.stream_trunk and resolved.type == "cpu":  # never loaded: mapped in its dtype
        from trainer.mapped_trunk import load_mapped_trunk

        trunk = load_mapped_trunk(trunk_path)
    else:
        trunk = load_trunk(trunk_path, dtype=dtype, device=str(resolved))
    store_path = expert_store.local_dir(config, "trainer", store_dir)
    store = expert_store.open_configured_store(config, "trainer", trunk.fingerprint, store_dir)
    return TrainerParts(
        section, trunk, store, trunk_path, store_path, paths.jobs_dir(config, jobs_dir)
    )


# ---- monitor ----------------------------------------------------------------------------
def open_monitor_files(
    root: Path, config: WorxConfig
) -> tuple[MatrixHistory, HeldoutSets, LiveState]:
    section = config.monitor
    history = MatrixHistory(root)
    heldout = HeldoutSets(root / "heldout", section.heldout_per_domain, section.heldout_seed)
    live = LiveState(root / "live.json")
    return history, heldout, live


def build_monitor(
    config: WorxConfig,
    root: Path,
    conf: dict[str, Any] | None = None,
    trunk_dir: str | None = None,
    store_dir: str | None = None,
    with_model: bool = True,
) -> MonitorStage:
    """The monitor stage; with ``with_model`` it loads the trunk and opens the expert store.

    ``conf`` (librdkafka settings) lets it fetch a job's held-out and training documents.
    """
    history, heldout, live = open_monitor_files(root, config)
    domains = KnownDomains(root)  # the server's routing table, followed from worx.domains
    section = config.monitor
    evaluator = baseline = store = fingerprint = None
    if with_model:
        import torch

        from experts.likelihood_routing import likelihood_router
        from experts.trunk import load_trunk
        from monitor.baseline import DenseBaseline
        from monitor.evaluator import Evaluator
        from monitor.routing import GateRouter
        from router.embed import default_embedder
        from router.gate import Gate
        from trainer.recipes.dense import DenseConfig

        if store_dir and not config.experts.store_url:  # named on the command line: must exist
            paths.existing_dir(paths.store_dir(config, store_dir), "expert store", paths.STORE_HINT)
        trunk_path = paths.trunk_dir(config, trunk_dir)
        trunk = load_trunk(trunk_path, dtype=getattr(torch, config.experts.trunk_dtype))
        fingerprint = trunk.fingerprint
        store = expert_store.open_configured_store(
            config,
            "monitor",
            fingerprint,
            store_dir,
            lru_budget_bytes=config.experts.lru_budget_mb << 20,
            create=False,  # the monitor only reads the store
        )
        e = config.experts
        router = GateRouter(
            default_embedder(config.router), Gate(e.gate_top_k, e.gate_temperature), domains.table
        )
        evaluator = Evaluator(
            trunk,
            store,
            heldout,
            history,
            router,
            section.max_tokens,
            section.batch_size,
            section.backfill,
            section.domains_wait_s,
            section.incremental,
            section.verify_every,
            section.verify_every_s,
        )
        # the serving rule's second step too, so the monitor measures what a request gets
        router.use_likelihood(likelihood_router(e), evaluator.likelihood_mixture, trunk.tokenizer)
        if section.baseline:
            # the same tokens per step as the expert recipe, so the comparison is like for like
            t = config.trainer
            dense = DenseConfig(
                steps=section.baseline_steps,
                lr=section.baseline_lr,
                seq_len=t.seq_len,
                micro_batch_size=t.micro_batch_size,
                grad_accum_steps=t.grad_accum_steps,
                progress=True,
            )
            baseline = DenseBaseline(
                str(trunk_path),
                heldout,
                history,
                root / "baseline",
                dense,
                section.max_tokens,
                section.batch_size,
            )
    fetch = None
    if conf:
        from topology.runtimes.range_reader import kafka_fetch

        fetch = kafka_fetch(conf, section.fetch_timeout_s)
    return MonitorStage(
        config.kafka.topic_prefix,
        history,
        heldout,
        live,
        evaluator,
        baseline,
        fetch,
        store,
        fingerprint,
        root,
        DomainLabels(root),
        domains,
        heap_keep_bytes=section.heap_keep_mb << 20 if section.heap_keep_mb >= 0 else None,
    )
