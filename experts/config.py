"""Configuration of the trunk, experts, mixture and expert store (section ``[experts]``)."""

from __future__ import annotations

from dataclasses import dataclass

DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class ExpertsConfig:
    trunk_dir: str = ""  # Hugging Face model directory; empty: the bundled default trunk
    trunk_dtype: str = "float32"  # dtype the trunk is loaded in for serving (one of DTYPES)
    store_dir: str = ""  # expert store root; empty: <data_dir>/experts
    # s3://bucket/prefix: the store is that bucket (credentials and endpoint from the
    # environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL), and the
    # directory above is each command's local cache of it; empty: the directory is the store
    store_url: str = ""
    lru_budget_mb: int = 512  # bytes of loaded experts kept in memory (LRU beyond it)
    # disk hygiene of the store (applied whenever a command opens it):
    quarantine_keep: int = 100  # newest .quarantine entries kept; 0: no count limit
    quarantine_max_age_days: float = 30.0  # older quarantined entries removed; 0: no age limit
    stale_tmp_after_s: float = 3600.0  # a lock-less .tmp-* dir unchanged this long is removed
    # the gate decides a document's domain by the domain table (route stage's rule and
    # per-domain thresholds), then mixes only that domain's experts:
    gate_top_k: int = 1  # most experts of the document's domain mixed (newest wins ties)
    gate_temperature: float = 0.1  # softmax temperature over the chosen experts' similarities
    # likelihood re-ranking of texts the route stage's rule leaves unsure (docs/experts.md):
    gate_likelihood_candidates: int = 8  # nearest domains whose experts score the text; 0: off
    gate_likelihood_margin: float = 0.5  # nats/token the best expert must beat the trunk by
    gate_likelihood_separation: float = 0.6  # ... and every other candidate's expert by
    gate_likelihood_max_tokens: int = 64  # tokens of the text's head scored (the extra cost)
    gate_likelihood_mix_margin: float = 3.0  # a novel text two experts explain about as well,
    # each this many nats/token better than the trunk, gets their mix (inf: never)
    serve_host: str = "127.0.0.1"  # HTTP API address (loopback unless you mean to expose it)
    serve_port: int = 8080  # HTTP API port (0: any free port, printed at start)
    max_tokens: int = 1024  # longest text scored (tokens beyond are cut, and reported)
    max_new_tokens: int = 128  # upper bound of one generate request

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
            )
            < 0
        ):
            raise ValueError(
                "experts.gate_likelihood_candidates must be >= 0 (0: off), "
                "experts.gate_likelihood_margin, _separation and _mix_margin >= 0"
            )
        if self.gate_likelihood_max_tokens < 2:
            raise ValueError("experts.gate_likelihood_max_tokens must be >= 2")
        if not 0 <= self.serve_port <= 65535:
            raise ValueError(f"experts.serve_port {self.serve_port} is not a port number")
        if self.max_tokens < 2 or self.max_new_tokens < 1:
            raise ValueError("experts.max_tokens must be >= 2 and experts.max_new_tokens >= 1")
