"""Configuration of the forgetting monitor and dashboard (section ``[monitor]``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MonitorConfig:
    host: str = "127.0.0.1"  # dashboard and /metrics address (loopback unless you mean it)
    port: int = 8765  # dashboard port (0: any free port, printed at start)
    # non-empty: /api/* and /metrics need "Authorization: Bearer <token>" (the page reads it
    # from its URL's #token=...); set it from the environment (WORX_MONITOR__API_TOKEN)
    api_token: str = ""
    # names the dashboard is reached by besides loopback and host (a Host header naming
    # anything else is refused: DNS rebinding), e.g. "monitor" for Prometheus in compose
    allowed_hosts: tuple[str, ...] = ()
    state_dir: str = ""  # history, held-out sets, baseline model; empty: <data_dir>/monitor
    heldout_per_domain: int = 64  # held-out documents kept per domain (bounded sample)
    heldout_seed: int = 0  # seed of that sample; changing it needs a fresh state_dir
    max_tokens: int = 128  # tokens scored per held-out document (its first ones)
    batch_size: int = 8  # documents per forward pass during evaluation
    backfill: bool = True  # re-evaluate earlier steps for a new/changed held-out set
    baseline: bool = True  # also run the dense sequential fine-tuning baseline
    baseline_steps: int = 50  # dense optimizer steps per domain (trainer.recipes.dense.DenseConfig)
    baseline_lr: float = 1e-3  # dense peak learning rate (the best of bench/train.py's sweep)
    group_id: str = ""  # consumer group of the monitor; empty: "<kafka.topic_prefix>-monitor"
    fetch_timeout_s: float = 15.0  # wait this long for a job's held-out documents
    domains_wait_s: float = 30.0  # a registration waits this long for its domain's row
    # score only held-out documents whose routing or experts changed since their loss was
    # measured (the others' losses cannot have changed: monitor/loss_cache.py); false:
    # every document of every domain at every registration (a check; cost grows with N^2)
    incremental: bool = True
    # re-verify every expert's weights (disk and memory, the store re-checking its sha256)
    # every this many registrations (1: at each) and at the first registration this many
    # seconds after the last full check (0: no time limit); also at start, on demand
    # (POST /api/evaluate) and at the end of a run. The trunk and the new expert are
    # checked at every registration.
    verify_every: int = 10
    verify_every_s: float = 600.0

    def validate(self) -> None:
        if not 0 <= self.port < 65536:
            raise ValueError(f"monitor.port must be in 0..65535, got {self.port}")
        if self.heldout_per_domain < 1 or self.max_tokens < 2 or self.batch_size < 1:
            raise ValueError(
                "monitor.heldout_per_domain and monitor.batch_size must be >= 1, "
                "monitor.max_tokens >= 2"
            )
        if self.domains_wait_s < 0:
            raise ValueError(f"monitor.domains_wait_s must be >= 0, got {self.domains_wait_s}")
        if self.verify_every < 1 or self.verify_every_s < 0:
            raise ValueError(
                "monitor.verify_every must be >= 1 (registrations) and monitor.verify_every_s "
                f">= 0 (seconds; 0: off), got {self.verify_every} and {self.verify_every_s}"
            )
        if self.baseline_steps < 1 or self.baseline_lr <= 0:
            raise ValueError("monitor.baseline_steps must be >= 1 and monitor.baseline_lr > 0")
