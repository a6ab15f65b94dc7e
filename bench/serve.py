"""Serving benchmark: hot registration, request latency, mixture overhead, gate, memory.

Prints ONE JSON line; each figure of ours sits beside its baseline measured in the same run:

* ``register_ms``: a registration event seen by the server -> first request answered by
  the new (~10M-parameter) expert, while a client sends requests of that expert's domain
  back to back (mean; ``register_ms_all`` lists them); ``verify_load_ms``: the part spent
  verifying sha256, loading and swapping the table.
* ``p50/p99_ms_steady`` vs ``p50/p99_ms_during_register``: /score latency over HTTP with no
  registration vs while registrations arrive back to back; ``failed_requests``.
* ``top1_over_trunk``, ``top2_over_trunk``: forward latency of the mixture with one / two
  experts per sequence over the trunk alone (a separately loaded copy with no hooks),
  same batch (targets <= 1.15 and <= 1.3).
* ``gate_us_10/100/1000``: gate time per document with that many domains in the domain
  table, one expert each (domain decision, then that domain's experts; the embedding is
  computed once, ``embed_us`` reports it); ``gate_loop_us_1000``: a plain Python loop over
  the domains, the naive baseline.
* ``rss_mb_1000``: resident memory of a serving process after requests have used each of
  1,000 stored experts under a fixed LRU budget ``lru_budget_mb``; ``rss_mb_before``: the
  same process before any expert was loaded; ``no_lru_mb``: the bytes of all experts
  (what holding them all would take).

Usage: ``python bench/serve.py [--trunk DIR] [--quick]`` (no trunk: the bundled default
trunk if present, else a GPT-2-family trunk of width 256 built from a config).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

# One BLAS thread: on a shared CPU, multi-threaded gemv spins and measures the contention.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from experts.expert import Expert, ExpertConfig  # noqa: E402
from experts.mixture import Mixture  # noqa: E402
from experts.testing import build_tiny_trunk  # noqa: E402
from experts.trunk import Trunk, load_trunk  # noqa: E402
from worx.bundled import domain_texts  # noqa: E402

log = logging.getLogger("bench.serve")
DOMAINS = ("python_code", "legal", "biomedical", "news", "scripture", "fiction_austen")


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


def _trunk_dir(args: argparse.Namespace, tmp: Path) -> Path:
    if args.trunk:
        return Path(args.trunk)
    try:
        from experts.default_trunk import default_trunk_dir

        default = default_trunk_dir()
        if (default / "config.json").is_file():
            return default
    except (ImportError, FileNotFoundError):
        pass
    return build_tiny_trunk(tmp / "trunk", family="gpt2", layers=4, width=256, vocab_size=2048)


def _randomize(expert: Expert, seed: int) -> Expert:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in expert.parameters():
            param.copy_(torch.randn(param.shape, generator=gen) * 0.02)
    return expert


def _domain_docs(domain: str, count: int, skip: int = 0) -> list[str]:
    return domain_texts(domain, count, skip, max_chars=1500)


def _centroid(embedder, domain: str) -> list[float]:
    c = embedder.embed(_domain_docs(domain, 20)).mean(axis=0)
    return (c / np.linalg.norm(c)).tolist()


def _domain_table(embedder, domains: list[str], docs=None):
    """The domain table discover would promote: each domain's centroid and thresholds by the
    router's rule (router/discover.py), from 80 of its documents (``docs(domain, count)``;
    default: the bundled corpus)."""
    docs = docs or _domain_docs
    from router.config import RouterConfig
    from router.records import DomainRecord
    from router.table import DomainTable

    config = RouterConfig()
    table = DomainTable()
    for domain in domains:
        vectors = embedder.embed(docs(domain, 80))  # (80, dim)
        centroid = vectors.mean(axis=0)
        centroid /= np.linalg.norm(centroid)
        sims = (vectors @ centroid).astype(np.float64)  # (80,)
        threshold = min(
            float(np.quantile(sims, config.threshold_quantile)),
            float(sims.mean() - config.threshold_std * sims.std()),
        )
        table.apply(DomainRecord(domain, centroid.tolist(), threshold, 80, float(sims.mean())))
    return table


def _routable_texts(embedder, table, domains: list[str], chars: int = 400) -> dict[str, str]:
    """Per domain, a held-out text (~100 tokens) that the domain table gives that domain."""
    out = {}
    for domain in domains:
        for text in _domain_docs(domain, 40, skip=60):
            text = text[:chars]
            if table.decide(embedder.embed([text])[0])[0] == domain:
                out[domain] = text
                break
        else:
            raise RuntimeError(f"no held-out {domain} text routes to {domain}")
    return out


# ---------------------------------------------------------------------- forward overhead
def bench_forward(trunk: Trunk, trunk_dir: Path, reps: int) -> dict:
    plain = load_trunk(trunk_dir, dtype=trunk.dtype)  # baseline: a copy with no hooks at all
    config = ExpertConfig(kind="adapter", layers=tuple(range(trunk.num_layers)), rank=64)
    experts = {f"e{i}": _randomize(Expert(config, trunk.hidden_size), i) for i in range(2)}
    mixture = Mixture(trunk, experts)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, len(trunk.tokenizer), (4, 128), generator=gen)  # (B, T)
    runs = {
        "trunk": lambda: plain.model(input_ids=ids, use_cache=False).logits,
        "top1": lambda: mixture.forward(ids, None, [{"e0": 1.0}] * 2 + [{"e1": 1.0}] * 2),
        "top2": lambda: mixture.forward(ids, None, [{"e0": 0.6, "e1": 0.4}] * 4),
    }
    times: dict[str, list[float]] = {k: [] for k in runs}
    with torch.no_grad():
        for fn in runs.values():
            fn()  # warm-up
        for _ in range(reps):  # interleaved, so drift in machine load hits all three alike
            for name, fn in runs.items():
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "trunk_forward_ms": round(med["trunk"] * 1000, 3),
        "top1_forward_ms": round(med["top1"] * 1000, 3),
        "top2_forward_ms": round(med["top2"] * 1000, 3),
        "top1_over_trunk": round(med["top1"] / med["trunk"], 4),
        "top2_over_trunk": round(med["top2"] / med["trunk"], 4),
        "forward_expert": {"layers": "all", "rank": 64, "batch": [4, 128]},
    }


# ---------------------------------------------------------------------- gate
def bench_gate(embedder) -> dict:
    from router.gate import DomainExperts, Gate, GateExpert
    from router.records import DomainRecord
    from router.table import DomainTable

    docs = [d for domain in DOMAINS for d in _domain_docs(domain, 20, skip=50)]
    start = time.perf_counter()
    vectors = embedder.embed(docs)  # (N, dim)
    embed_us = (time.perf_counter() - start) / len(docs) * 1e6
    gate = Gate(top_k=2, temperature=0.1)
    rng = np.random.default_rng(0)
    out = {"embed_us": round(embed_us, 2)}
    for count in (10, 100, 1000):
        centroids = rng.normal(size=(count, embedder.dim))
        centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
        table = DomainTable()
        for i, c in enumerate(centroids):
            table.apply(DomainRecord(f"d{i:04d}", c.tolist(), -1.0, 10, 0.5))  # all routable
        experts = DomainExperts(
            GateExpert(f"e{i:04d}", f"d{i:04d}", c.tolist()) for i, c in enumerate(centroids)
        )
        for v in vectors[:5]:
            gate.route(v, table, experts)
        start = time.perf_counter()
        for v in vectors:
            gate.route(v, table, experts)
        out[f"gate_us_{count}"] = round((time.perf_counter() - start) / len(vectors) * 1e6, 2)
        if count == 1000:  # naive baseline: one cosine per domain in Python
            rows = [(f"d{i:04d}", r) for i, r in enumerate(centroids.astype(np.float32))]
            start = time.perf_counter()
            for v in vectors[:20]:
                best = sorted(((float(np.dot(v, r)), i) for i, r in rows), reverse=True)[:2]
                del best
            out["gate_loop_us_1000"] = round((time.perf_counter() - start) / 20 * 1e6, 2)
    return out


# ---------------------------------------------------------------------- serving + registration
class _Client:
    def __init__(self, base: str, texts: dict[str, str]) -> None:
        self.base, self.texts = base, texts
        self.log: list[
            tuple[float, float, str, int, dict]
        ] = []  # (start, end, domain, status, body)
        self.cond = threading.Condition()
        self.stop = threading.Event()
        self.focus: str | None = None  # the domain whose expert is being registered

    def one(self, domain: str) -> None:
        data = json.dumps({"text": self.texts[domain]}).encode()
        start = time.perf_counter()
        try:
            with urllib.request.urlopen(f"{self.base}/score", data=data, timeout=120) as r:
                status, body = r.status, json.loads(r.read())
        except Exception as exc:  # noqa: BLE001 - a failed request is a measured outcome
            status, body = -1, {"error": repr(exc)}
        with self.cond:
            self.log.append((start, time.perf_counter(), domain, status, body))
            self.cond.notify_all()

    def loop(self, domains: list[str]) -> None:
        """Cycle over ``domains``, or send only ``self.focus``'s text while it is set."""
        i = 0
        while not self.stop.is_set():
            self.one(self.focus or domains[i % len(domains)])
            i += 1


def bench_serving(trunk: Trunk, tmp: Path, args: argparse.Namespace, embedder) -> dict:
    """Steady vs during-registration latency with the same per-request cost in both phases.

    Phase A registers one ~10M-parameter expert per domain ("old-<domain>"). Phase B (steady)
    serves requests routed to them. Phase C registers a second expert per domain with the
    same centroid ("new-<domain>", the newer, which wins the tie) while requests keep flowing:
    every request runs one 10M expert in B and in C, so only the registrations differ.
    """
    from confluent_kafka import Producer

    from experts.serving import ExpertServer
    from experts.store import ExpertStore
    from router.gate import Gate
    from topology.composition.embedded_broker import EmbeddedBroker
    from topology.composition.topics import Topics, ensure_topics
    from topology.serve.http_api import make_http_server
    from topology.serve.registration_follower import RegistrationFollower

    root = tmp / "store"
    store = ExpertStore(root, trunk.fingerprint)
    layers = tuple(range(trunk.num_layers))
    rank = max(1, round(10_000_000 / (len(layers) * (2 * trunk.hidden_size + 1))))  # ~10M
    domains = list(DOMAINS[: args.registrations])
    manifests: dict[str, list] = {"old": [], "new": []}
    for phase, seed in (("old", 100), ("new", 200)):
        for i, domain in enumerate(domains):
            expert = _randomize(
                Expert(ExpertConfig(kind="adapter", layers=layers, rank=rank), trunk.hidden_size),
                seed + i,
            )
            centroid = _centroid(embedder, domain)
            manifests[phase].append(store.put(f"{phase}-{domain}", expert, domain, centroid))
    # a fresh store handle: nothing cached, the server verifies and loads on registration
    store = ExpertStore(root, trunk.fingerprint, lru_budget_bytes=2 << 30)
    table = _domain_table(embedder, domains)
    server = ExpertServer(trunk, store, embedder, Gate(top_k=1), table)
    texts = _routable_texts(embedder, table, domains)
    seen_at: dict[str, float] = {}
    topic = Topics("bench").experts
    with EmbeddedBroker() as broker:
        conf = {"bootstrap.servers": broker.bootstrap_servers}
        ensure_topics(conf, prefix="bench", partitions=1)
        follower = RegistrationFollower(server, conf, topic)
        original = follower.handle

        def timed_handle(key, value):
            if key is not None:
                seen_at[key.decode()] = time.perf_counter()
            return original(key, value)

        follower.handle = timed_handle
        follower.start()
        httpd = make_http_server(server, "127.0.0.1", 0).start()
        client = _Client(f"http://127.0.0.1:{httpd.server_address[1]}", texts)
        producer = Producer(conf)
        thread = threading.Thread(target=client.loop, args=(domains,))
        thread.start()
        register_ms: dict[str, list[float]] = {"old": [], "new": []}
        windows = []
        for phase in ("old", "new"):
            if phase == "new":  # phase B: steady, then phase C
                with client.cond:
                    mark = len(client.log)
                    client.cond.wait_for(lambda m=mark: len(client.log) >= m + args.requests, 600)
                    steady_log = client.log[mark:]
            t_begin = time.perf_counter()
            for manifest in manifests[phase]:
                eid = manifest.expert_id
                client.focus = manifest.domain_id  # the next requests are routed to it
                producer.produce(topic, key=eid, value=manifest.registration().to_json())
                producer.flush(10)
                with client.cond:

                    def used(eid=eid):
                        return any(b.get("experts") == {eid: 1.0} for *_, b in client.log)

                    if not client.cond.wait_for(used, timeout=300):
                        raise RuntimeError(f"expert {eid} was never served")
                    first = min(e for _, e, _, _, b in client.log if b.get("experts") == {eid: 1.0})
                register_ms[phase].append((first - seen_at[eid]) * 1000)
            client.focus = None
            windows.append((t_begin, time.perf_counter()))
        client.stop.set()
        thread.join()
        httpd.stop()
        follower.stop()
    t_begin, t_end = windows[1]
    steady = [(e - s) * 1000 for s, e, _, st, _ in steady_log if st == 200]
    during = [
        (e - s) * 1000 for s, e, _, st, _ in client.log if st == 200 and s <= t_end and e >= t_begin
    ]
    verify = [o.elapsed_ms for o in follower.outcomes if o.status == "registered"]
    return {
        "register_ms": round(statistics.mean(register_ms["new"]), 2),
        "register_ms_all": [round(v, 2) for v in register_ms["old"] + register_ms["new"]],
        "verify_load_ms": round(statistics.mean(verify), 2),
        "registered_expert_params": manifests["new"][0].num_params,
        "registrations": len(verify),
        "p50_ms_steady": round(_percentile(steady, 50), 2),
        "p99_ms_steady": round(_percentile(steady, 99), 2),
        "p50_ms_during_register": round(_percentile(during, 50), 2),
        "p99_ms_during_register": round(_percentile(during, 99), 2),
        "requests_steady": len(steady),
        "requests_during_register": len(during),
        "failed_requests": sum(1 for *_, st, _ in client.log if st != 200),
        "server_failed_requests": server.failed_requests,
    }


# ---------------------------------------------------------------------- memory with 1,000 experts
def bench_rss(trunk_dir: Path, tmp: Path, args: argparse.Namespace) -> dict:
    """Write the store here, measure in a fresh process (no allocator history from writing)."""
    from experts.store import ExpertStore
    from experts.trunk import trunk_fingerprint

    fingerprint = trunk_fingerprint(trunk_dir)
    trunk_cfg = json.loads((trunk_dir / "config.json").read_text())
    width = int(trunk_cfg.get("hidden_size") or trunk_cfg.get("n_embd"))
    store = ExpertStore(tmp / "store1000", fingerprint)
    rng = np.random.default_rng(1)
    config = ExpertConfig(kind="adapter", layers=(0,), rank=args.rss_rank)
    from router.embed import default_embedder

    dim = default_embedder().dim
    from tqdm import tqdm

    for i in tqdm(range(args.experts), desc="writing experts", file=sys.stderr, disable=None):
        centroid = rng.normal(size=dim)
        expert = _randomize(Expert(config, width), 1000 + i)
        store.put(f"x{i:04d}", expert, "d", (centroid / np.linalg.norm(centroid)).tolist())
    cmd = [
        sys.executable,
        __file__,
        "--rss-child",
        str(tmp / "store1000"),
        "--trunk",
        str(trunk_dir),
    ]
    cmd += ["--lru-budget-mb", str(args.lru_budget_mb), "--threads", str(args.threads)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def rss_child(args: argparse.Namespace) -> None:
    import psutil

    from experts.serving import ExpertServer
    from experts.store import ExpertStore
    from router.embed import default_embedder
    from router.gate import Gate

    proc = psutil.Process()
    trunk = load_trunk(args.trunk)
    store = ExpertStore(
        args.rss_child, trunk.fingerprint, lru_budget_bytes=args.lru_budget_mb << 20
    )
    server = ExpertServer(trunk, store, default_embedder(), Gate())
    server.rebuild_from_store()
    text = "The quick brown fox jumps over the lazy dog. " * 4
    server.score(text, expert_weights={})  # warm the trunk path
    before = proc.memory_info().rss
    sizes = 0
    ids = list(server.table)
    for expert_id in ids:  # every expert serves one request, through the LRU
        server.score(text, expert_weights={expert_id: 1.0})
        sizes += server.table.manifests[expert_id].size_bytes
    after = proc.memory_info().rss
    info = store.cache_info()
    print(
        json.dumps(
            {
                "experts_registered": len(ids),
                "rss_mb_before": round(before / 2**20, 1),
                "rss_mb_1000": round(after / 2**20, 1),
                "rss_growth_mb": round((after - before) / 2**20, 1),
                "lru_budget_mb": args.lru_budget_mb,
                "lru_cached_mb": round(info["cached_bytes"] / 2**20, 1),
                "no_lru_mb": round(sizes / 2**20, 1),
                "expert_loads": info["loads"],
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trunk", help="trunk directory (default: bundled trunk or a built one)")
    parser.add_argument("--requests", type=int, default=200, help="steady-state requests")
    parser.add_argument("--registrations", type=int, default=6, help="~10M experts registered")
    parser.add_argument("--experts", type=int, default=1000, help="experts for the RSS figure")
    parser.add_argument("--rss-rank", type=int, default=256, help="rank of those experts")
    parser.add_argument("--lru-budget-mb", type=int, default=64)
    parser.add_argument("--reps", type=int, default=30, help="forward repetitions")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--quick", action="store_true", help="fewer requests and repetitions")
    parser.add_argument("--rss-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    if args.rss_child:
        rss_child(args)
        return
    if args.quick:
        args.requests, args.reps = 60, 10
    from router.embed import default_embedder

    embedder = default_embedder()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        trunk_dir = _trunk_dir(args, tmp)
        trunk = load_trunk(trunk_dir)
        result = {
            "trunk": str(trunk_dir),
            "trunk_family": trunk.family,
            "trunk_params": trunk.num_params(),
            "torch_threads": args.threads,
        }
        result.update(bench_forward(trunk, trunk_dir, args.reps))
        result.update(bench_gate(embedder))
        result.update(bench_serving(trunk, tmp, args, embedder))
        result.update(bench_rss(trunk_dir, tmp, args))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
