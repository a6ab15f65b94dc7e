"""The parts of bench/serve_load.py: the corpus texts, the expert stores, one `worx serve`
subprocess, closed-loop aiohttp clients, the summaries and the bare-trunk bound.

Nothing here prints; bench/serve_load.py puts the parts together into its one JSON line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "serve-load-bench"
# ten domains that the tf-idf domain table tells apart: the bundled corpus's seven, then
# three unlike them from data/corpus_many (>= 9, so 8 clients pin 8 different experts)
DOMAINS = (
    "python_code",
    "legal",
    "biomedical",
    "news",
    "scripture",
    "fiction_austen",
    "tech_docs",
    "prose_es",
    "bibtex",
    "svg_icons",
)


# ---------------------------------------------------------------------- machine
def cpus() -> int:
    """The cores this process may run on (the affinity mask, else os.cpu_count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def loadavg() -> list[float]:
    return [round(v, 2) for v in os.getloadavg()]


def others_cores_busy(seconds: float = 2.0) -> float | None:
    """Cores' worth of CPU the machine spent over ``seconds`` while this process slept
    (``/proc/stat``; None where it does not exist): what others run now. The load average
    decays over minutes, so right after a run it still shows that run."""

    def busy_total() -> tuple[int, int]:
        with open("/proc/stat") as stat:
            fields = [int(v) for v in stat.readline().split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return sum(fields[:8]) - idle, sum(fields[:8])  # guest time is inside user

    try:
        busy0, total0 = busy_total()
        time.sleep(seconds)
        busy1, total1 = busy_total()
    except OSError:
        return None
    share = (busy1 - busy0) / max(1, total1 - total0)
    return round(share * (os.cpu_count() or 1), 2)


# ---------------------------------------------------------------------- corpus
def domain_docs(domain: str, count: int, skip: int = 0, max_chars: int = 1500) -> list[str]:
    """``count`` documents of ``domain`` from the bundled corpus, else data/corpus_many."""
    from worx.bundled import corpus_dir, data_dir, domain_texts

    folder = corpus_dir()
    if not any(folder.glob(f"{domain}.jsonl*")):
        folder = data_dir() / "corpus_many"
    return domain_texts(domain, count, skip, max_chars=max_chars, directory=folder)


def centroid(embedder, domain: str) -> list[float]:
    c = embedder.embed(domain_docs(domain, 20)).mean(axis=0)
    return (c / np.linalg.norm(c)).tolist()


def domain_table(embedder, domains: list[str]):
    """The domain table discover would promote (bench/serve.py's rule), 80 documents each,
    from the bundled corpus or data/corpus_many."""
    from bench.serve import _domain_table

    return _domain_table(embedder, domains, domain_docs)


def routable_texts(
    embedder, table, domains: list[str], chars: int, per_domain: int
) -> dict[str, list[str]]:
    """Per domain, up to ``per_domain`` held-out texts of ``chars`` characters (documents at
    least that long, cut) that the domain table gives that domain; at least one each."""
    out: dict[str, list[str]] = {}
    for domain in domains:
        found = []
        for text in domain_docs(domain, 200, skip=80, max_chars=None):
            if len(text) < chars:
                continue
            text = text[:chars]
            if table.decide(embedder.embed([text])[0])[0] == domain:
                found.append(text)
                if len(found) == per_domain:
                    break
        if not found:
            raise RuntimeError(f"no held-out {chars}-char {domain} text routes to {domain}")
        out[domain] = found
    return out


# ---------------------------------------------------------------------- stores
@dataclass
class Stores:
    """The template stores every server copies: ``store`` (one expert per domain) and
    ``staging`` (the experts announced during the hot-registration phase, in order)."""

    store: Path
    staging: Path
    announce: list  # manifests in staging, in announcement order
    expert_params: int


def build_stores(tmp: Path, trunk, domains: list[str], centroids: dict, rank: int, count: int):
    import torch

    from experts.expert import Expert, ExpertConfig
    from experts.store import ExpertStore

    layers = tuple(range(trunk.num_layers))
    store = ExpertStore(tmp / "store", trunk.fingerprint)
    staging = ExpertStore(tmp / "staging", trunk.fingerprint)
    announce, params = [], 0
    for k in range(len(domains) + count):
        domain = domains[k % len(domains)]
        target = store if k < len(domains) else staging  # one per domain at start
        expert = Expert(ExpertConfig(kind="adapter", layers=layers, rank=rank), trunk.hidden_size)
        gen = torch.Generator().manual_seed(k)
        with torch.no_grad():
            for param in expert.parameters():
                param.copy_(torch.randn(param.shape, generator=gen) * 0.02)
        manifest = target.put(f"e{k}-{domain}", expert, domain, centroids[domain])
        params = manifest.num_params
        if target is staging:
            announce.append(manifest)
    return Stores(store.root, staging.root, announce, params)


# ---------------------------------------------------------------------- one server
@dataclass
class Server:
    base: str
    proc: subprocess.Popen
    store: Path
    staging: Path
    log_path: Path
    prefix: str


def _get(url: str) -> dict:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def health(server: Server) -> dict:
    return _get(f"{server.base}/health")


def expert_models(server: Server) -> list[str]:
    """The expert ids GET /v1/models lists, sorted."""
    data = _get(f"{server.base}/v1/models")["data"]
    return sorted(m["id"] for m in data if m.get("kind") == "expert")


def wait_health(server: Server, ok: Callable[[dict], bool], timeout_s: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        body = health(server)
        if ok(body) or time.monotonic() > deadline:
            return body
        time.sleep(0.2)  # polling the server's /health: it has no event to await


@contextlib.contextmanager
def serve(
    tmp: Path,
    stores: Stores,
    trunk_dir: Path,
    broker,
    table,
    domains: list[str],
    env_extra: dict[str, str],
    name: str,
) -> Iterator[Server]:
    """A `worx serve` subprocess on copies of the template stores, following topics of its
    own prefix (the domain table published there first), with ``env_extra`` set."""
    from confluent_kafka import Producer

    from topology.composition.topics import Topics, ensure_topics

    root = tmp / name
    store, staging = root / "store", root / "staging"
    shutil.copytree(stores.store, store)
    shutil.copytree(stores.staging, staging)
    prefix = f"load-{name}"
    conf = {"bootstrap.servers": broker.bootstrap_servers}
    ensure_topics(conf, prefix=prefix, partitions=1)
    producer = Producer(conf)
    for domain in domains:
        producer.produce(Topics(prefix).domains, key=domain, value=table.get(domain).to_json())
    assert producer.flush(15) == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORX_")}
    env.update(
        WORX_KAFKA__BOOTSTRAP_SERVERS=broker.bootstrap_servers,
        WORX_KAFKA__TOPIC_PREFIX=prefix,
        WORX_KAFKA__PARTITIONS="1",
        WORX_SERVE__API_TOKEN=TOKEN,
        TOKENIZERS_PARALLELISM="false",
        **env_extra,
    )
    argv = [sys.executable, "-m", "topology.commands", "serve", "--trunk", str(trunk_dir)]
    argv += ["--store", str(store), "--port", "0"]
    log_path = root / "serve.log"
    with log_path.open("w") as log_file:
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=log_file, text=True, env=env, cwd=ROOT
        )
        try:
            line = proc.stdout.readline()
            if not line.startswith("serving on "):
                raise RuntimeError(f"worx serve did not start: {log_path.read_text()[-3000:]}")
            yield Server(line.split()[-1], proc, store, staging, log_path, prefix)
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def log_problems(path: Path, keep: int = 5) -> dict:
    """Lines of the server's log that say ERROR / Traceback / Exception, counted, a few kept."""
    lines = [
        ln.strip()
        for ln in path.read_text(errors="replace").splitlines()
        if re.search(r"ERROR|Traceback|Exception|CRITICAL", ln)
    ]
    return {"count": len(lines), "first": [ln[:300] for ln in lines[:keep]]}


# ---------------------------------------------------------------------- clients
Row = tuple[float, float, int, int]  # start, end, status, completion tokens


async def run_clients(
    base: str,
    body: Callable[[int, int], dict],
    clients: int,
    phases: list[tuple[str, float]],
    on_phase: Callable[[str], None] | None = None,
    errors: list | None = None,
) -> tuple[list[Row], dict[str, tuple[float, float]]]:
    """``clients`` closed loops posting ``body(client, n)`` to /v1/completions back to
    back through ``phases`` (name, seconds), then waiting for the requests in flight.

    Returns the rows and each phase's (start, end); a row belongs to the phase its answer
    arrived in. A 503 waits for its Retry-After (at most 1 s), as OpenAI's clients do; a
    few non-200 answers are kept in ``errors``."""
    import aiohttp

    rows: list[Row] = []
    headers = {"Authorization": f"Bearer {TOKEN}"}
    timeout = aiohttp.ClientTimeout(total=300)
    connector = aiohttp.TCPConnector(limit=clients)
    stop = asyncio.Event()
    url = f"{base}/v1/completions"
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:

        async def client(i: int) -> None:
            n = 0
            while not stop.is_set():
                start = time.perf_counter()
                tokens, wait = 0, 0.0
                try:
                    async with session.post(url, json=body(i, n), headers=headers) as r:
                        raw = await r.read()
                        status = r.status
                    if status == 200:
                        tokens = json.loads(raw)["usage"]["completion_tokens"]
                    else:
                        if errors is not None and len(errors) < 5:
                            errors.append(
                                {"status": status, "body": raw[:300].decode(errors="replace")}
                            )
                        wait = min(float(r.headers.get("Retry-After", 0.05)), 1.0)
                except Exception as exc:  # noqa: BLE001 - a failed request is a measured outcome
                    status, wait = -1, 0.05
                    if errors is not None and len(errors) < 5:
                        errors.append({"status": -1, "body": repr(exc)[:300]})
                rows.append((start, time.perf_counter(), status, tokens))
                n += 1
                if wait:
                    await asyncio.sleep(wait)

        tasks = [asyncio.create_task(client(i)) for i in range(clients)]
        spans: dict[str, tuple[float, float]] = {}
        for name, seconds in phases:
            if on_phase is not None:
                on_phase(name)
            t0 = time.perf_counter()
            await asyncio.sleep(seconds)
            spans[name] = (t0, time.perf_counter())
        stop.set()
        await asyncio.gather(*tasks)
    return rows, spans


def percentile(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 2) if values else None


def summary(rows: list[Row], span: tuple[float, float]) -> dict[str, Any]:
    """Requests answered within ``span``: requests/s (200s), p50/p99 ms, failures, tokens/s."""
    t0, t1 = span
    seconds = t1 - t0
    inside = [r for r in rows if t0 <= r[1] < t1]
    ok = [(end - start) * 1000 for start, end, status, _ in inside if status == 200]
    tokens = sum(r[3] for r in inside if r[2] == 200)
    return {
        "requests_per_s": round(len(ok) / seconds, 2),
        "p50_ms": percentile(ok, 50),
        "p99_ms": percentile(ok, 99),
        "ok": len(ok),
        "failed": sum(1 for r in inside if r[2] != 200),
        "busy_503": sum(1 for r in inside if r[2] == 503),
        "completion_tokens_per_s": round(tokens / seconds, 1),
        "seconds": round(seconds, 2),
    }


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


# ---------------------------------------------------------------------- the bound
def trunk_bound(trunk, texts: list[str], batches: tuple[int, ...], seconds: float, threads: int):
    """Texts/s of the bare trunk, forward + next-token loss, in batches of each size in
    ``batches`` (tokenised as the server does, cut to its max_tokens, right-padded with a
    mask), each for at least ``seconds`` and 3 batches: one forward at a time on ``threads``
    torch threads, and (``threads`` > 1) ``threads`` forwards at once from as many threads on
    one torch thread each (on a small CPU a forward's Python steps leave cores idle that
    another forward fills). The bound is the best of them all."""
    import threading

    import torch

    from experts.mixture import next_token_losses

    config = trunk.model.config
    positions = getattr(config, "max_position_embeddings", None) or getattr(
        config, "n_positions", None
    )
    limit = min(1024, positions) if positions else 1024  # ExpertServer's max_tokens
    ids = [trunk.tokenizer(t)["input_ids"][:limit] for t in texts]
    pad = trunk.tokenizer.pad_token_id or 0

    def padded(size: int) -> list:
        out = []
        for k in range(0, max(len(ids), size), size):
            chunk = [ids[(k + j) % len(ids)] for j in range(size)]
            width = max(len(c) for c in chunk)
            input_ids = torch.full((size, width), pad, dtype=torch.long)  # (B, T)
            mask = torch.zeros((size, width), dtype=torch.long)  # (B, T)
            for j, c in enumerate(chunk):
                input_ids[j, : len(c)] = torch.tensor(c)
                mask[j, : len(c)] = 1
            out.append((input_ids, mask))
        return out

    def step(input_ids, mask) -> None:
        logits = trunk.model(input_ids=input_ids, attention_mask=mask, use_cache=False).logits
        next_token_losses(logits, input_ids, mask)

    def stream(prepared: list, offset: int, torch_threads: int, done: list[int]) -> None:
        torch.set_num_threads(torch_threads)  # this thread's own
        with torch.no_grad():
            step(*prepared[offset % len(prepared)])  # warm-up
            count, start = 0, time.perf_counter()
            while time.perf_counter() - start < seconds or count < 3:
                step(*prepared[(offset + count) % len(prepared)])
                count += 1
        done.append(count)

    def texts_per_s(size: int, streams: int) -> float:
        prepared, done = padded(size), []
        workers = [
            threading.Thread(target=stream, args=(prepared, k, threads // streams, done))
            for k in range(streams)
        ]
        start = time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        return round(sum(done) * size / (time.perf_counter() - start), 2)

    layouts = [1] + ([threads] if threads > 1 else [])  # forwards at once
    measured = {(n, size): texts_per_s(size, n) for n in layouts for size in batches}
    streams, size = max(measured, key=measured.get)
    return {
        "texts_per_s": measured[streams, size],
        "best_batch": size,
        "best_forwards_at_once": streams,
        "texts_per_s_by_batch": {str(b): measured[1, b] for b in batches},
        "texts_per_s_by_batch_forwards_at_once": {
            str(b): measured[threads, b] for b in batches if (threads, b) in measured
        },
        "tokens_per_text_mean": round(sum(len(i) for i in ids) / len(ids), 1),
        "threads": threads,
    }
