"""Configuration of the route and discover stages (section ``[router]``)."""

from __future__ import annotations

from dataclasses import dataclass

from worx.settings import setting


@dataclass(frozen=True)
class RouterConfig:
    # --- embedder (shared by route, discover and the inference gate: keep them equal) ---
    embedder: str = setting(
        "tfidf",
        help="the embedder of route, discover and the inference gate (keep them equal): "
        '"tfidf" (no model), "trunk" (mean-pooled hidden states of the trunk in '
        "embedder_trunk_dir) or \"sentence\" (all-MiniLM-L6-v2, needs the 'embedders' extra); "
        'the thresholds are tuned for "tfidf": re-measure with bench/discovery.py '
        "--set embedder=... before relying on another",
        choices=("tfidf", "trunk", "sentence"),
    )
    embedder_trunk_dir: str = setting(
        "", help='the trunk of embedder "trunk"; empty: the bundled trunk'
    )
    embed_dim: int = setting(
        1024,
        help="dimension of the hashed TF-IDF embedding (signed hash buckets)",
        range=">= 8",
    )
    embed_char_ngrams: tuple[int, ...] = setting(
        (3, 4, 5), help="byte n-gram orders hashed besides words", range="each in 1..16"
    )
    embed_word_weight: float = setting(
        1.0, help="weight of the word block vs each n-gram block", range=">= 0"
    )
    embed_tf_cap: float = setting(
        4.0, help="cap of the sublinear term frequency 1 + log(tf)", range=">= 1"
    )
    embed_max_chars: int = setting(
        4000, help="only this many leading characters are embedded", unit="chars", range=">= 1"
    )
    embed_shape_weight: float = setting(
        1.5,
        help="weight of the text-form block vs each content block (0: the form block off)",
        range=">= 0",
    )

    # --- route: per-domain threshold, learned at promotion from the members' similarities ---
    threshold_quantile: float = setting(
        0.02,
        help="a domain's threshold = min(this quantile, mean - threshold_std * std) of its "
        "members' cosines, minus threshold_margin: a promoted core is the dense middle of a "
        "domain, so its spread (not its own lowest quantile) says how far the domain's tail "
        "reaches",
        range="[0, 0.5)",
    )
    threshold_std: float = setting(
        3.0, help="member std units below the mean in the threshold (see threshold_quantile)"
    )
    threshold_margin: float = setting(
        0.0, help="subtracted from the learned threshold (see threshold_quantile)", unit="cosine"
    )
    uncertain_std: float = setting(
        1.0,
        help="core threshold = mean - uncertain_std * std: an assigned document below it is "
        '"uncertain" and its text goes to discover too (a new domain may hide there)',
    )

    # --- discover: online clustering of novel documents ---
    buffer_docs: int = setting(
        2000,
        help="novel documents held for clustering (oldest dropped first): a kind of text at "
        "1% of a stream that holds dozens needs a long memory to gather a core",
        unit="docs",
        range=">= promote_min_size",
    )
    buffer_max_age: int = setting(
        20000,
        help="a buffered document is dropped once this many decisions old (leftovers)",
        unit="decisions",
    )
    replay_window_docs: int = setting(
        10000,
        help="doc ids of the latest decisions discover remembers: a second decision for one "
        "of them is a route worker's replay (a batch routed again after a crash or a "
        "rebalance) and is skipped; keep it above route's batch_size times its workers "
        "(0: off)",
        unit="decisions",
        range=">= 0",
    )
    cluster_every: int = setting(
        20,
        help="re-cluster the buffer after this many new novel documents",
        unit="docs",
        range=">= 1",
    )
    cluster_knn: int = setting(
        10, help="neighbours per document in the shared-nearest-neighbour graph", range=">= 2"
    )
    cluster_shared: float = setting(
        0.3, help="fraction of neighbours two linked documents must share", range="(0, 1]"
    )
    cluster_coarse_knn: int = setting(
        0,
        help="documents in no core are clustered again with this many neighbours (0: off): a "
        "domain of many unrelated sources has no dense core at cluster_knn for hundreds of "
        "documents",
    )
    cluster_split_similarity: float = setting(
        0.5,
        help="a core whose 2-means halves are less similar than this chains two groups "
        "(halves of one domain: ~0.9): each is judged alone",
        unit="cosine",
    )
    promote_min_size: int = setting(
        40, help="a core needs this many documents to become a domain", unit="docs", range=">= 5"
    )
    promote_stable_runs: int = setting(
        2, help="...and must persist over this many clustering runs", unit="runs"
    )
    promote_min_cohesion: float = setting(
        0.15, help="...and its members' mean cosine to its centroid", unit="cosine"
    )
    promote_min_rate: float = setting(
        0.0,
        help="...and its documents must have arrived at this share of the stream (10th-90th "
        "percentile of arrivals; 0: off): off, because a company's stream mixes dozens of "
        "kinds at once, each far below any burst share; a known domain's leftovers are told "
        "apart by belonging (belong_level, belong_separation) and the claims test instead",
    )
    promote_min_threshold: float = setting(
        0.08,
        help="...and a learned threshold at least this high (a core mixing several domains "
        "is wide, and its threshold would swallow them all)",
        unit="cosine",
    )
    promote_max_claim_ratio: float = setting(
        1.0,
        help="...and its threshold may take at most this many buffered documents outside the "
        "core per member (0: off): a core that would take more is a chain of several kinds' "
        "first documents",
    )
    promote_claim_patience: int = setting(
        8,
        help="...unless it has persisted over this many clustering runs (0: the claims test "
        "always holds): a core that stays while its threshold takes more of the buffer is "
        "one domain with a wide tail of its own loose documents; a chain changes sooner, as "
        "its neighbours gather cores of their own",
        unit="runs",
        range=">= 0",
    )
    promote_burst_rate: float = setting(
        0.2,
        help="a core whose documents made up at least this share of the stream while they "
        "arrived (10th-90th percentile of arrivals) is a burst of something new: its claims "
        "are its own kind's loose documents (no claims test), and it is no known domain's "
        "tail by the level test (0: off). Measured: cores of a kind arriving alone 0.17-0.87, "
        "cores of a stream mixing dozens of kinds <= 0.1",
        range=">= 0",
    )
    belong_level: float = setting(
        0.5,
        help="a core whose median member passes threshold + this share of (core_threshold - "
        "threshold) of a known domain is that domain's leftovers",
    )
    belong_separation: float = setting(
        1.5,
        help="a core whose centroid cosine to a known domain is at least this times its "
        "cohesion is that domain's: it stands apart from the domain by less than its own "
        "members spread (0: off)",
        range=">= 0",
    )
    merge_similarity: float = setting(
        0.75,
        help="a core this close (cosine of centroids) to a known domain is that domain's, not "
        "a new one (subsets of one domain: ~0.9; distinct: < 0.7)",
        unit="cosine",
    )

    # --- discover: training jobs ---
    job_docs: int = setting(
        256,
        help="a job is emitted once a domain has gathered documents of this many distinct "
        "texts (a text repeated under several ids counts once: a job trains on it once)",
        unit="docs",
        range=">= 1",
    )
    job_min_docs: int = setting(
        128,
        help="...or this many (at most job_docs) once job_wait_docs decisions passed or "
        "none arrived for job_quiet_docs decisions",
        unit="docs",
        range=">= 1",
    )
    job_quiet_min_docs: int = setting(
        40,
        help="...or this many (at most job_min_docs) once job_wait_docs decisions passed "
        "and then no new text of the domain arrived for job_quiet_docs decisions: its texts "
        "stopped coming, so waiting cannot add to its job (a rare kind, or one part of a "
        "kind found as several domains, that would otherwise never get its expert)",
        unit="docs",
        range=">= 1",
    )
    job_quiet_docs: int = setting(
        1000,
        help="decisions without a new text of the domain (0: off)",
        unit="decisions",
        range=">= 0",
    )
    job_wait_docs: int = setting(
        3000,
        help="...or job_min_docs once this many decisions passed since the domain's first "
        "gathered document (0: off): a rare kind that trickles in, never quiet and far from "
        "job_docs, still gets its expert",
        unit="decisions",
        range=">= 0",
    )
    heldout_fraction: float = setting(
        0.1,
        help="share of texts kept out of training (hash of the text; of doc_id for records "
        "of a route without content ids)",
        range="[0, 1)",
    )
    heldout_salt: str = setting(
        "worx-heldout", help="salt of that hash; change it only with a new data set"
    )

    # --- discover: drift detectors ---
    novelty_delta: float = setting(
        0.1,
        help="novelty-rate rise ignored (rate of novel docs, 0..1) by the Page-Hinkley "
        "detector (one-sided; the defaults never fire when the stream is stationary: see "
        "docs/discovery.md)",
    )
    novelty_threshold: float = setting(
        40.0, help="Page-Hinkley alarm level on the novelty indicator", range="> 0"
    )
    distance_delta: float = setting(0.5, help="per-domain distance rise ignored", unit="member std")
    distance_threshold: float = setting(
        60.0, help="Page-Hinkley alarm level on standardised distance", range="> 0"
    )
    detector_min_docs: int = setting(
        50, help="observations before a detector may fire", unit="docs", range=">= 1"
    )

    # --- discover: state ---
    snapshot_every_s: float = setting(
        5.0, help="snapshot at least this often (always before emitting)", unit="s"
    )

    def validate(self) -> None:
        if self.embedder not in ("tfidf", "trunk", "sentence"):
            raise ValueError(
                f"router.embedder must be 'tfidf', 'trunk' or 'sentence', got {self.embedder!r}"
            )
        if self.embed_dim < 8:
            raise ValueError("router.embed_dim must be >= 8")
        if not self.embed_char_ngrams or any(n < 1 or n > 16 for n in self.embed_char_ngrams):
            raise ValueError("router.embed_char_ngrams must list n-gram orders in 1..16")
        if self.embed_shape_weight < 0:
            raise ValueError("router.embed_shape_weight must be >= 0 (0 turns the form block off)")
        if self.belong_separation < 0:
            raise ValueError("router.belong_separation must be >= 0 (0 turns the test off)")
        if self.promote_claim_patience < 0:
            raise ValueError("router.promote_claim_patience must be >= 0 (0: no patience)")
        if self.promote_burst_rate < 0:
            raise ValueError("router.promote_burst_rate must be >= 0 (0 turns the rule off)")
        if self.embed_word_weight < 0 or self.embed_tf_cap < 1 or self.embed_max_chars < 1:
            raise ValueError(
                "router.embed_word_weight must be >= 0, embed_tf_cap >= 1, embed_max_chars >= 1"
            )
        if not 0.0 <= self.threshold_quantile < 0.5:
            raise ValueError("router.threshold_quantile must be in [0, 0.5)")
        small_buffer = self.buffer_docs < self.promote_min_size
        if self.promote_min_size < 5 or self.cluster_knn < 2 or small_buffer:
            raise ValueError(
                "router.promote_min_size must be >= 5, cluster_knn >= 2 and buffer_docs >= "
                "promote_min_size"
            )
        if not 0.0 < self.cluster_shared <= 1.0 or self.cluster_every < 1:
            raise ValueError("router.cluster_shared must be in (0, 1], cluster_every >= 1")
        if not 0.0 <= self.heldout_fraction < 1.0 or self.job_docs < 1:
            raise ValueError("router.heldout_fraction must be in [0, 1), job_docs >= 1")
        if min(self.job_min_docs, self.job_quiet_min_docs) < 1:
            raise ValueError("router.job_min_docs and job_quiet_min_docs must be >= 1")
        if min(self.job_quiet_docs, self.replay_window_docs) < 0:
            raise ValueError("router.job_quiet_docs and replay_window_docs must be >= 0")
        if min(self.novelty_threshold, self.distance_threshold) <= 0 or self.detector_min_docs < 1:
            raise ValueError("router detector thresholds must be > 0, detector_min_docs >= 1")
