"""Configuration of the route and discover stages (section ``[router]``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RouterConfig:
    # --- embedder (shared by route, discover and the inference gate: keep them equal) ---
    # "tfidf" (the default: no model), "trunk" (mean-pooled hidden states of the trunk in
    # embedder_trunk_dir, empty: the bundled trunk) or "sentence" (all-MiniLM-L6-v2, needs
    # the 'embedders' extra). The thresholds below are tuned for "tfidf": re-measure with
    # bench/discovery.py --set embedder=... before relying on another.
    embedder: str = "tfidf"
    embedder_trunk_dir: str = ""
    embed_dim: int = 1024  # dimension of the hashed TF-IDF embedding (signed hash buckets)
    embed_char_ngrams: tuple[int, ...] = (3, 4, 5)  # byte n-gram orders hashed besides words
    embed_word_weight: float = 1.0  # weight of the word block vs each n-gram block
    embed_tf_cap: float = 4.0  # cap of the sublinear term frequency 1 + log(tf)
    embed_max_chars: int = 4000  # only this many leading characters are embedded
    embed_shape_weight: float = 1.5  # weight of the text-form block vs each content block

    # --- route: per-domain threshold, learned at promotion from the members' similarities ---
    # threshold = min(quantile, mean - threshold_std * std) of the members' cosines, minus
    # the margin: a promoted core is the dense middle of a domain, so its spread (not its
    # own lowest quantile) says how far the domain's tail reaches
    threshold_quantile: float = 0.02
    threshold_std: float = 3.0
    threshold_margin: float = 0.0
    # core threshold = mean - uncertain_std * std: an assigned document below it is
    # "uncertain" and its text goes to discover too (a new domain may hide there)
    uncertain_std: float = 1.0

    # --- discover: online clustering of novel documents ---
    buffer_docs: int = 2000  # novel documents held for clustering (oldest dropped first):
    # a kind of text at 1% of a stream that holds dozens needs a long memory to gather a core
    buffer_max_age: int = 20000  # ...and dropped once this many decisions old (leftovers)
    cluster_every: int = 20  # re-cluster the buffer after this many new novel documents
    cluster_knn: int = 10  # neighbours per document in the shared-nearest-neighbour graph
    cluster_shared: float = 0.3  # fraction of neighbours two linked documents must share
    cluster_coarse_knn: int = 0  # documents in no core are clustered again with this many
    # neighbours (0: off): a domain of many unrelated sources has no dense core at
    # cluster_knn for hundreds of documents
    cluster_split_similarity: float = 0.5  # a core whose 2-means halves are less similar
    # than this chains two groups (halves of one domain: ~0.9): each is judged alone
    promote_min_size: int = 40  # a core needs this many documents to become a domain
    promote_stable_runs: int = 2  # ...and must persist over this many clustering runs
    promote_min_cohesion: float = 0.15  # ...and its members' mean cosine to its centroid
    promote_min_rate: float = 0.0  # ...and its documents must have arrived at this share
    # of the stream (10th-90th percentile of arrivals; 0: off): off, because a company's
    # stream mixes dozens of kinds at once, each far below any burst share; a known
    # domain's leftovers are told apart by belonging (below) and the claims test instead
    promote_min_threshold: float = 0.08  # ...and a learned threshold at least this high (a
    # core mixing several domains is wide, and its threshold would swallow them all)
    promote_max_claim_ratio: float = 1.0  # ...and its threshold may take at most this many
    # buffered documents outside the core per member (0: off): a core that would take more
    # is a chain of several kinds' first documents
    belong_level: float = 0.5  # a core whose median member passes threshold + this share of
    # (core_threshold - threshold) of a known domain is that domain's leftovers
    belong_separation: float = 1.5  # a core whose centroid cosine to a known domain is at
    # least this times its cohesion is that domain's: it stands apart from the domain by
    # less than its own members spread (0: off)
    merge_similarity: float = 0.75  # a core this close (cosine of centroids) to a known
    # domain is that domain's, not a new one (subsets of one domain: ~0.9; distinct: < 0.7)

    # --- discover: training jobs ---
    job_docs: int = 256  # a job is emitted once a domain has gathered this many documents
    job_min_docs: int = 128  # ...or this many (at most job_docs), when then none arrived for
    # job_quiet_docs
    job_quiet_docs: int = 1000  # decisions without a document of the domain (0: off)
    heldout_fraction: float = 0.1  # share of documents kept out of training (hash of doc_id)
    heldout_salt: str = "worx-heldout"  # salt of that hash; change it only with a new data set

    # --- discover: drift detectors (Page-Hinkley, one-sided; defaults never fire when
    # the stream is stationary: see docs/discovery.md) ---
    novelty_delta: float = 0.1  # novelty-rate rise ignored (rate of novel docs, 0..1)
    novelty_threshold: float = 40.0  # Page-Hinkley alarm level on the novelty indicator
    distance_delta: float = 0.5  # per-domain distance rise ignored, in member std units
    distance_threshold: float = 60.0  # Page-Hinkley alarm level on standardised distance
    detector_min_docs: int = 50  # observations before a detector may fire

    # --- discover: state ---
    snapshot_every_s: float = 5.0  # snapshot at least this often (always before emitting)

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
        if self.job_min_docs < 1 or self.job_quiet_docs < 0:
            raise ValueError("router.job_min_docs must be >= 1, job_quiet_docs >= 0")
        if min(self.novelty_threshold, self.distance_threshold) <= 0 or self.detector_min_docs < 1:
            raise ValueError("router detector thresholds must be > 0, detector_min_docs >= 1")
