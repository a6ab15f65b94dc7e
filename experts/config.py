"""Configuration of the trunk, experts, mixture and expert store (section ``[experts]``)."""

from __future__ import annotations

from dataclasses import dataclass

from worx.settings import setting

DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class ExpertsConfig:
    trunk_dir: str = setting(
        "", help="Hugging Face model directory; empty: the bundled default trunk"
    )
    trunk_dtype: str = setting(
        "float32", help="dtype the trunk is loaded in for serving", choices=DTYPES
    )
    store_dir: str = setting(
        "",
        help="expert store root (`--store` wins); empty: trainer.store_dir, else "
        "<data_dir>/experts",
    )
    store_url: str = setting(
        "",
        help="s3://bucket/prefix: the store is that bucket (credentials and endpoint from the "
        "environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL), and "
        "store_dir is each command's local cache of it; empty: the directory is the store",
    )
    lru_budget_mb: int = setting(
        512, help="bytes of loaded experts kept in memory (LRU beyond it)", unit="MB", range=">= 1"
    )
    quarantine_keep: int = setting(
        100,
        help="newest .quarantine entries of the store kept (applied whenever a command opens "
        "it); 0: no count limit",
        unit="entries",
        range=">= 0",
    )
    quarantine_max_age_days: float = setting(
        30.0, help="older quarantined entries removed; 0: no age limit", unit="days", range=">= 0"
    )
    stale_tmp_after_s: float = setting(
        3600.0,
        help="a lock-less .tmp-* dir unchanged this long is removed (a live writer must never "
        "lose its temporary directory)",
        unit="s",
        range=">= 60",
    )
    gate_top_k: int = setting(
        1,
        help="the gate decides a document's domain by the domain table (route stage's rule "
        "and per-domain thresholds), then mixes at most this many experts of that domain "
        "(newest wins ties)",
        unit="experts",
        range=">= 1",
    )
    gate_temperature: float = setting(
        0.1, help="softmax temperature over the chosen experts' similarities", range="> 0"
    )
    gate_likelihood_candidates: int = setting(
        8,
        help="likelihood re-ranking of texts the route stage's rule leaves unsure "
        "(docs/experts.md): nearest domains whose experts score the text; 0: off",
        unit="domains",
        range=">= 0",
    )
    gate_likelihood_margin: float = setting(
        0.5,
        help="nats/token the best expert must beat the trunk by",
        unit="nats/token",
        range=">= 0",
    )
    gate_likelihood_separation: float = setting(
        0.6, help="... and every other candidate's expert by", unit="nats/token", range=">= 0"
    )
    gate_likelihood_max_tokens: int = setting(
        64, help="tokens of the text's head scored (the extra cost)", unit="tokens", range=">= 2"
    )
    gate_likelihood_mix_margin: float = setting(
        3.0,
        help="a novel text two experts explain about as well, each this many nats/token "
        "better than the trunk, gets their mix (inf: never)",
        unit="nats/token",
        range=">= 0",
    )
    gate_likelihood_contest_gap: float = setting(
        0.0,
        help="a text the route stage assigns is re-ranked when another domain with an "
        "expert reaches its own threshold too, at most this much cosine below the nearest "
        "(0: never; inf: any such domain)",
        unit="cosine",
        range=">= 0",
    )
    gate_likelihood_contest_waiting: bool = setting(
        True,
        help="a text the route stage gives a domain without an expert (yet) is re-ranked "
        "as a novel one, among the nearest domains with an expert "
        "(bench/routing_forgetting.py --lag)",
    )
    gate_likelihood_incumbent: bool = setting(
        True,
        help="a newer domain's expert takes a text from an older one only by explaining it "
        "better by margin and separation, never by a tie (false: all candidates at once)",
    )
    serve_host: str = setting(
        "127.0.0.1", help="HTTP API address (loopback unless you mean to expose it)"
    )
    serve_port: int = setting(
        8080, help="HTTP API port (0: any free port, printed at start)", range="0..65535"
    )
    max_tokens: int = setting(
        1024,
        help="longest text scored (tokens beyond are cut, and reported)",
        unit="tokens",
        range=">= 2",
    )
    max_new_tokens: int = setting(
        128, help="upper bound of one generate request", unit="tokens", range=">= 1"
    )

    def store_options(self) -> dict[str, float]:
        """Keyword arguments of ``ExpertStore`` that come from this section (retention)."""
        return {
            "quarantine_keep": self.quarantine_keep,
            "quarantine_max_age_s": self.quarantine_max_age_days * 86400,
            "stale_tmp_after_s": self.stale_tmp_after_s,
        }

    def validate(self) -> None:
        if self.trunk_dtype not in DTYPES:
            raise ValueError(f"experts.trunk_dtype {self.trunk_dtype!r} is not one of {DTYPES}")
        if self.store_url:
            from experts.object_store import parse_store_url

            parse_store_url(self.store_url)  # ValueError naming the setting
        if self.lru_budget_mb < 1:
            raise ValueError("experts.lru_budget_mb must be >= 1")
        if self.quarantine_keep < 0 or self.quarantine_max_age_days < 0:
            raise ValueError(
                "experts.quarantine_keep and experts.quarantine_max_age_days must be >= 0 "
                "(0: no limit)"
            )
        if self.stale_tmp_after_s < 60:
            raise ValueError(
                "experts.stale_tmp_after_s must be >= 60 (a live writer must never lose its "
                "temporary directory)"
            )
        if self.gate_top_k < 1 or self.gate_temperature <= 0:
            raise ValueError("experts.gate_top_k must be >= 1 and experts.gate_temperature > 0")
        if (
            self.gate_likelihood_candidates < 0
            or min(
                self.gate_likelihood_margin,
                self.gate_likelihood_separation,
                self.gate_likelihood_mix_margin,
                self.gate_likelihood_contest_gap,
            )
            < 0
        ):
            raise ValueError(
                "experts.gate_likelihood_candidates must be >= 0 (0: off), "
                "experts.gate_likelihood_margin, _separation, _mix_margin and _contest_gap >= 0"
            )
        if self.gate_likelihood_max_tokens < 2:
            raise ValueError("experts.gate_likelihood_max_tokens must be >= 2")
        if not 0 <= self.serve_port <= 65535:
            raise ValueError(f"experts.serve_port {self.serve_port} is not a port number")
        if self.max_tokens < 2 or self.max_new_tokens < 1:
            raise ValueError("experts.max_tokens must be >= 2 and experts.max_new_tokens >= 1")
