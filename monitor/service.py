"""Assemble the monitor from the configuration: files on disk, the model, the stage."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from monitor.domains import KnownDomains
from monitor.heldout import HeldoutSets
from monitor.history import MatrixHistory
from monitor.labels import DomainLabels
from monitor.live import LiveState
from monitor.stage import MonitorStage, kafka_fetch

log = logging.getLogger(__name__)


def state_dir(config: Any, override: str | None = None) -> Path:
    """``--state-dir``, else ``monitor.state_dir``, else ``<data_dir>/monitor``."""
    return Path(override or config.monitor.state_dir or Path(config.data_dir) / "monitor")


def open_files(root: Path, config: Any) -> tuple[MatrixHistory, HeldoutSets, LiveState]:
    section = config.monitor
    history = MatrixHistory(root)
    heldout = HeldoutSets(root / "heldout", section.heldout_per_domain, section.heldout_seed)
    live = LiveState(root / "live.json")
    return history, heldout, live


def build_monitor(
    config: Any,
    root: Path,
    conf: dict[str, Any] | None = None,
    trunk_dir: str | None = None,
    store_dir: str | None = None,
    with_model: bool = True,
) -> MonitorStage:
    """The monitor stage; with ``with_model`` it loads the trunk and opens the expert store.

    ``conf`` (librdkafka settings) lets it fetch a job's held-out and training documents.
    """
    history, heldout, live = open_files(root, config)
    domains = KnownDomains(root)  # the server's routing table, followed from worx.domains
    section = config.monitor
    evaluator = baseline = store = fingerprint = None
    if with_model:
        import torch

        from experts.serving import resolve_paths
        from experts.store import ExpertStore
        from experts.trunk import load_trunk
        from monitor.baseline import DenseBaseline
        from monitor.evaluator import Evaluator
        from monitor.routing import GateRouter
        from router.embed import default_embedder
        from router.gate import Gate
        from trainer.dense import DenseConfig

        trunk_path, store_path = resolve_paths(config, trunk_dir, store_dir)
        trunk = load_trunk(trunk_path, dtype=getattr(torch, config.experts.trunk_dtype))
        fingerprint = trunk.fingerprint
        store = ExpertStore(store_path, fingerprint, config.experts.lru_budget_mb << 20)
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
        )
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
                trunk_path,
                heldout,
                history,
                root / "baseline",
                dense,
                section.max_tokens,
                section.batch_size,
            )
    fetch = kafka_fetch(conf, section.fetch_timeout_s) if conf else None
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
    )
