"""Configuration of the forgetting monitor and dashboard (section ``[monitor]``)."""

from __future__ import annotations

from dataclasses import dataclass

from worx.settings import setting


@dataclass(frozen=True)
class MonitorConfig:
    host: str = setting(
        "127.0.0.1", help="dashboard and /metrics address (loopback unless you mean it)"
    )
    port: int = setting(
        8765, help="dashboard port (0: any free port, printed at start)", range="0..65535"
    )
    api_token: str = setting(
        "",
        help='non-empty: /api/* and /metrics need "Authorization: Bearer <token>" (the page '
        "reads it from its URL's #token=...); set it from the environment "
        "(WORX_MONITOR__API_TOKEN)",
    )
    allowed_hosts: tuple[str, ...] = setting(
        (),
        help="names the dashboard is reached by besides loopback and host (a Host header "
        'naming anything else is refused: DNS rebinding), e.g. "monitor" for Prometheus in '
        "compose",
    )
    state_dir: str = setting(
        "", help="history, held-out sets, baseline model; empty: <data_dir>/monitor"
    )
    heldout_per_domain: int = setting(
        64, help="held-out documents kept per domain (bounded sample)", unit="docs", range=">= 1"
    )
    heldout_seed: int = setting(0, help="seed of that sample; changing it needs a fresh state_dir")
    max_tokens: int = setting(
        128,
        help="tokens scored per held-out document (its first ones)",
        unit="tokens",
        range=">= 2",
    )
    batch_size: int = setting(
        8, help="documents per forward pass during evaluation", unit="docs", range=">= 1"
    )
    backfill: bool = setting(True, help="re-evaluate earlier steps for a new/changed held-out set")
    baseline: bool = setting(True, help="also run the dense sequential fine-tuning baseline")
    baseline_steps: int = setting(
        50,
        help="dense optimizer steps per domain (trainer.recipes.dense.DenseConfig)",
        unit="steps",
        range=">= 1",
    )
    baseline_lr: float = setting(
        1e-3, help="dense peak learning rate (the best of bench/train.py's sweep)", range="> 0"
    )
    group_id: str = setting(
        "",
        help="consumer group of the monitor (one per deployment, as route's and discover's); "
        'empty: "<kafka.topic_prefix>-monitor"',
    )
    fetch_timeout_s: float = setting(
        15.0, help="wait this long for a job's held-out documents", unit="s"
    )
    domains_wait_s: float = setting(
        30.0, help="a registration waits this long for its domain's row", unit="s", range=">= 0"
    )
    incremental: bool = setting(
        True,
        help="score only held-out documents whose routing or experts changed since their loss "
        "was measured (the others' losses cannot have changed: monitor/loss_cache.py); "
        "false: every document of every domain at every registration (a check; cost grows "
        "with N^2)",
    )
    verify_every: int = setting(
        10,
        help="re-verify every expert's weights (disk and memory, the store re-checking its "
        "sha256) every this many registrations (1: at each); also at start, on demand (POST "
        "/api/evaluate) and at the end of a run. The trunk and the new expert are checked at "
        "every registration.",
        unit="registrations",
        range=">= 1",
    )
    verify_every_s: float = setting(
        600.0,
        help="... and at the first registration this many seconds after the last full check "
        "(0: no time limit)",
        unit="s",
        range=">= 0",
    )
    heap_keep_mb: int = setting(
        64,
        help="after each registration's evaluation (and dense baseline step), free heap memory "
        "above this much is handed back to the OS (glibc malloc_trim, router/allocator.py): "
        "the evaluation's temporaries otherwise stay resident as fragmented free heap, "
        "hundreds of MB per registration with the bundled trunk; -1: never",
        unit="MB",
        range=">= -1",
    )

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
        if self.heap_keep_mb < -1:
            raise ValueError(f"monitor.heap_keep_mb must be >= -1, got {self.heap_keep_mb}")
        if self.baseline_steps < 1 or self.baseline_lr <= 0:
            raise ValueError("monitor.baseline_steps must be >= 1 and monitor.baseline_lr > 0")
