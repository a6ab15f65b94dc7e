"""Load on a real `worx serve`: the unbatched serving path beside the batched one.

ONE run starts `worx serve` (a subprocess, embedded broker, the bundled trunk unless
``--trunk``) twice, on copies of the same expert store (one expert per domain, ten
domains), with the same texts, workers and threads (OMP_NUM_THREADS = this machine's
cores): first with ``WORX_SERVE__BATCHING=false`` (one request per forward), then with
``WORX_SERVE__BATCHING=true`` (``--batch-window-ms``, ``--batch-max-rows``). Closed-loop
aiohttp clients speak OpenAI's wire format (``POST /v1/completions``); each phase has a
warm-up (``--warmup`` s, not measured), then ``--seconds`` s measured: a request counts in
the phase its answer arrived in; in-flight requests are waited for before the next phase.
A 503 waits for its Retry-After (at most 1 s) and counts as failed. Both servers run
side by side (the idle one only polls its topics) and each phase runs on one, then on the
other, which goes first alternating phase by phase, so drift in the machine's load hits
both alike; the two hot-registration phases run on one server, then on the other.

Phases, per server:

* ``scoring_1/8/32``: ``{model: auto, prompt: ~1,000 chars, max_tokens: 0, echo: true,
  logprobs: 0}`` (the prompt's own loss, as /score) at 1, 8 and 32 clients;
* ``generation_1/16``: ``{model: auto, prompt: ~200 chars, max_tokens: 64,
  temperature: 0}`` at 1 and 16 clients; ``completion_tokens_per_s`` is the sum of
  ``usage.completion_tokens`` over the phase's seconds;
* ``generation_pinned_16``: the same at 16 clients, each with ``model`` an expert id (one
  of the ten each, in turn): generation without the gate and the likelihood step, which
  re-ranks most prompts this short (one scoring forward of 1 + candidates rows first);
* ``mixed_experts_8`` / ``single_expert_8``: scoring with ``model`` an expert id (GET
  /v1/models), 8 clients each on another expert vs all 8 on the same one;
* ``steady_8`` / ``during_registration_8``: scoring at 8 clients, then the same while a new
  expert is announced every ``--register-every`` s (written to a staging store before the
  run, renamed into the store and announced on ``<prefix>.experts`` when its turn comes:
  what the trainer does; same size as the one it supersedes, so only the registration
  differs).

Every phase reports requests_per_s, p50_ms, p99_ms, failed (non-200, 503 included) and
busy_503. Before the servers and again after them, the bench itself measures the
machine's ``bound``: the bare trunk (load_trunk, no_grad), forward + next-token loss, on
the scoring texts (tokenised as the server does, right-padded with a mask), in texts/s:
the best of batches of 1, 8 and 32 (``--bound-batches``; on a small CPU the largest batch
need not be the fastest), each run one forward at a time on every core and ``cores``
forwards at once on one core each (the batched server runs
``serve.batch_forward_threads`` forwards at once); all are reported. The bound is the
mean of the two measurements (``bound.before`` and ``bound.after``): a shared machine's
speed drifts over the run's minutes, and the phases run between them.

Prints ONE JSON line; top-level figures (targets in ``targets``):

* ``rps_over_bound_8``: batched scoring requests/s at 8 clients / bound (>= 0.85);
* ``p99_8_batched_over_unbatched``: scoring p99 at 8 clients, batched / unbatched;
* ``gen_tokens_per_s_ratio_16``: generated tokens/s at 16 clients, batched / unbatched (>= 4);
* ``gen_pinned_tokens_per_s_ratio_16``: the same for ``generation_pinned_16`` (batching
  alone, without the routing's own forwards; no target of its own);
* ``p50_ratio_1``: scoring p50 at 1 client, batched / unbatched (<= 1.1);
* ``p99_ratio_during_over_steady``: batched server, during registration / steady (<= 1.2);
* ``failed_requests``: non-200 answers over the whole batched run, warm-ups included (0);
* ``mixed_experts_over_single``: batched, 8 experts / 1 expert scoring requests/s (>= 0.75);

and ``unbatched`` / ``batched`` with every phase, the registrations seen, the server's
counters and the errors its log shows; ``loadavg_before/after``, ``cpus``,
``omp_wait_policy`` (the servers inherit this bench's environment; None: the default),
``others_cores_busy_before`` (cores' worth of CPU the machine used over 2 s while the
bench slept, before it started anything), ``machine_busy`` (that above a quarter of a
core; where ``/proc/stat`` is missing, the 1-minute load above half the cores: the load
average decays over minutes, so after a run it still shows that run), ``commit`` and
``date``.

Usage: ``python bench/serve_load.py [--seconds 10] [--warmup 2] [--trunk DIR]
[--workers 2] [--expert-rank 64] [--trunk-dtype float32]`` (``--seconds 2`` for a quick
check; ``--trunk-dtype bfloat16``: both servers serve a bf16 trunk, ``experts.trunk_dtype``,
and the bound runs in bf16; the servers never inherit this bench's ``WORX_*`` variables).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import sys
import tempfile
import threading
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import serve_load_parts as parts  # noqa: E402
from experts.config import DTYPES  # noqa: E402

TARGETS = {
    "rps_over_bound_8": ">= 0.85",
    "gen_tokens_per_s_ratio_16": ">= 4",
    "p50_ratio_1": "<= 1.1",
    "p99_ratio_during_over_steady": "<= 1.2",
    "failed_requests": "0",
    "mixed_experts_over_single": ">= 0.75",
}


def _phase(server, args, body, clients, errors, all_rows) -> dict:
    phases = [("warmup", args.warmup), ("measured", args.seconds)]
    rows, spans = asyncio.run(parts.run_clients(server.base, body, clients, phases, errors=errors))
    all_rows.extend(rows)
    return {"clients": clients, **parts.summary(rows, spans["measured"])}


def _registration(server, stores, args, body, errors, all_rows) -> tuple[dict, dict, int]:
    """steady_8, then during_registration_8 while the staged experts are announced."""
    from confluent_kafka import Producer

    from topology.composition.topics import Topics

    producer = Producer({"bootstrap.servers": args.bootstrap})
    topic = Topics(server.prefix).experts
    stop = threading.Event()

    def register() -> None:
        for manifest in stores.announce:
            expert_id = manifest.expert_id
            os.rename(server.staging / expert_id, server.store / expert_id)
            producer.produce(topic, key=expert_id, value=manifest.registration().to_json())
            producer.flush(10)
            if stop.wait(args.register_every):
                return

    registrar = threading.Thread(target=register)

    def on_phase(name: str) -> None:
        if name == "during":
            registrar.start()
        elif name == "cooldown":
            stop.set()

    phases = [("warmup", args.warmup), ("steady", args.seconds), ("during", args.seconds)]
    phases.append(("cooldown", 0.0))
    rows, spans = asyncio.run(
        parts.run_clients(server.base, body, 8, phases, on_phase, errors=errors)
    )
    stop.set()
    if registrar.is_alive() or registrar.ident:
        registrar.join()
    all_rows.extend(rows)
    announced = sum(1 for m in stores.announce if (server.store / m.expert_id).exists())
    steady = {"clients": 8, **parts.summary(rows, spans["steady"])}
    during = {"clients": 8, **parts.summary(rows, spans["during"])}
    return steady, during, announced


def measure(servers: dict, stores, args, texts: list[str], prompts: list[str]) -> dict:
    """Every phase on both running servers, interleaved: each phase runs on one server,
    then the other (which goes first alternates), so drift in the machine's load between
    phases hits both alike."""
    names = list(servers)
    start = {
        n: parts.wait_health(s, lambda h: h["domains"] == args.domains) for n, s in servers.items()
    }
    errors: dict = {n: [] for n in names}
    rows: dict = {n: [] for n in names}
    out: dict = {n: {} for n in names}
    experts = {n: parts.expert_models(s) for n, s in servers.items()}

    def scoring(model=None):
        def body(i: int, n: int) -> dict:
            prompt = texts[(i * 7 + n) % len(texts)]
            chosen = "auto" if model is None else model(i)
            return {
                "model": chosen,
                "prompt": prompt,
                "max_tokens": 0,
                "echo": True,
                "logprobs": 0,
            }

        return body

    def generation(model=None):
        def body(i: int, n: int) -> dict:
            prompt = prompts[(i * 3 + n) % len(prompts)]
            chosen = "auto" if model is None else model(i)
            return {"model": chosen, "prompt": prompt, "max_tokens": 64, "temperature": 0}

        return body

    specs = [(f"scoring_{c}", lambda n: scoring(), c) for c in (1, 8, 32)]
    specs += [(f"generation_{c}", lambda n: generation(), c) for c in (1, 16)]
    specs.append(
        (
            "generation_pinned_16",
            lambda n: generation(lambda i: experts[n][i % len(experts[n])]),
            16,
        )
    )
    specs.append(("mixed_experts_8", lambda n: scoring(lambda i: experts[n][i % 8]), 8))
    specs.append(("single_expert_8", lambda n: scoring(lambda i: experts[n][0]), 8))
    for k, (phase, body, clients) in enumerate(specs):
        for n in names if k % 2 == 0 else names[::-1]:
            out[n][phase] = _phase(servers[n], args, body(n), clients, errors[n], rows[n])
    for n in names:
        steady, during, announced = _registration(
            servers[n], stores, args, scoring(), errors[n], rows[n]
        )
        o = out[n]
        o["steady_8"], o["during_registration_8"] = steady, during
        end = parts.wait_health(
            servers[n], lambda h, n=n, a=announced: h["experts"] >= start[n]["experts"] + a, 60
        )
        o["experts_listed"] = len(experts[n])
        o["registrations_announced"] = announced
        o["registrations_served"] = end["experts"] - start[n]["experts"]
        o["p99_ratio_during_over_steady"] = parts.ratio(during["p99_ms"], steady["p99_ms"])
        o["mixed_experts_over_single"] = parts.ratio(
            o["mixed_experts_8"]["requests_per_s"], o["single_expert_8"]["requests_per_s"]
        )
        o["requests"] = len(rows[n])
        o["failed_requests"] = sum(1 for r in rows[n] if r[2] != 200)
        o["busy_503"] = sum(1 for r in rows[n] if r[2] == 503)
        o["server_failed_requests"] = end.get("failed_requests")
        o["server_busy_refusals"] = end.get("busy_refusals")
        o["refusals"] = len(end.get("refusals", []))
        o["error_samples"] = errors[n]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="measured s per phase")
    parser.add_argument("--warmup", type=float, default=2.0, help="warm-up s before each phase")
    parser.add_argument("--trunk", help="trunk directory (default: the bundled data/trunk)")
    parser.add_argument("--workers", type=int, default=2, help="WORX_SERVE__WORKERS, both")
    parser.add_argument(
        "--trunk-dtype",
        default="float32",
        choices=DTYPES,
        help="experts.trunk_dtype of both servers; the bound's trunk runs in it too",
    )
    parser.add_argument("--batch-window-ms", type=float, default=2.0)
    parser.add_argument("--batch-max-rows", type=int, default=16)
    parser.add_argument("--expert-rank", type=int, default=64, help="adapter rank, all layers")
    parser.add_argument("--register-every", type=float, default=1.0)
    parser.add_argument("--text-chars", type=int, default=1000, help="scoring prompt length")
    parser.add_argument("--prompt-chars", type=int, default=200, help="generation prompt length")
    parser.add_argument(
        "--bound-batches", default="1,8,32", help="batch sizes of the bound (the best counts)"
    )
    args = parser.parse_args()

    import torch

    from experts.trunk import load_trunk
    from router.embed import default_embedder
    from topology.composition.embedded_broker import EmbeddedBroker
    from worx.bundled import trunk_dir as bundled_trunk_dir

    cores = parts.cpus()
    load_before = parts.loadavg()
    others_busy = parts.others_cores_busy()
    trunk_dir = Path(args.trunk) if args.trunk else bundled_trunk_dir()
    trunk = load_trunk(trunk_dir)  # builds the experts: stored in float32, as a trainer's
    served_dtype = getattr(torch, args.trunk_dtype)
    embedder = default_embedder()
    domains = list(parts.DOMAINS)
    args.domains = len(domains)
    table = parts.domain_table(embedder, domains)
    by_domain = parts.routable_texts(embedder, table, domains, args.text_chars, per_domain=3)
    texts = [t for i in range(3) for d in domains for t in by_domain[d][i : i + 1]]
    prompts = [t[: args.prompt_chars] for t in texts]
    sizes = tuple(int(b) for b in args.bound_batches.split(","))
    bound_seconds = max(3.0, args.seconds / 2)
    bound_trunk = trunk if served_dtype == torch.float32 else load_trunk(trunk_dir, served_dtype)
    bound_before = parts.trunk_bound(bound_trunk, texts, sizes, bound_seconds, cores)
    del bound_trunk
    centroids = {d: parts.centroid(embedder, d) for d in domains}
    count = max(1, int(args.seconds / args.register_every)) + 1
    env = {
        "OMP_NUM_THREADS": str(cores),
        "WORX_SERVE__WORKERS": str(args.workers),
        "WORX_SERVE__BATCH_WINDOW_MS": str(args.batch_window_ms),
        "WORX_SERVE__BATCH_MAX_ROWS": str(args.batch_max_rows),
        "WORX_EXPERTS__TRUNK_DTYPE": args.trunk_dtype,
    }
    with tempfile.TemporaryDirectory() as tmp_name, EmbeddedBroker() as broker:
        tmp = Path(tmp_name)
        args.bootstrap = broker.bootstrap_servers
        stores = parts.build_stores(tmp, trunk, domains, centroids, args.expert_rank, count)
        del trunk  # the bench holds no model while the servers run
        modes = {"unbatched": "false", "batched": "true"}
        extra = {n: {**env, "WORX_SERVE__BATCHING": b} for n, b in modes.items()}
        with contextlib.ExitStack() as stack:
            servers = {
                n: stack.enter_context(
                    parts.serve(tmp, stores, trunk_dir, broker, table, domains, extra[n], n)
                )
                for n in modes
            }
            result = measure(servers, stores, args, texts, prompts)
        for n, srv in servers.items():
            result[n]["server_log_problems"] = parts.log_problems(srv.log_path)
            result[n]["env"] = extra[n]

    bound_after = parts.trunk_bound(
        load_trunk(trunk_dir, served_dtype), texts, sizes, bound_seconds, cores
    )
    bound = {
        "texts_per_s": round((bound_before["texts_per_s"] + bound_after["texts_per_s"]) / 2, 2),
        "before": bound_before,
        "after": bound_after,
    }
    un, ba = result["unbatched"], result["batched"]
    top = {
        "bench": "serve_load",
        "rps_over_bound_8": parts.ratio(ba["scoring_8"]["requests_per_s"], bound["texts_per_s"]),
        "p99_8_batched_over_unbatched": parts.ratio(
            ba["scoring_8"]["p99_ms"], un["scoring_8"]["p99_ms"]
        ),
        "gen_tokens_per_s_ratio_16": parts.ratio(
            ba["generation_16"]["completion_tokens_per_s"],
            un["generation_16"]["completion_tokens_per_s"],
        ),
        "gen_pinned_tokens_per_s_ratio_16": parts.ratio(
            ba["generation_pinned_16"]["completion_tokens_per_s"],
            un["generation_pinned_16"]["completion_tokens_per_s"],
        ),
        "p50_ratio_1": parts.ratio(ba["scoring_1"]["p50_ms"], un["scoring_1"]["p50_ms"]),
        "p99_ratio_during_over_steady": ba["p99_ratio_during_over_steady"],
        "failed_requests": ba["failed_requests"],
        "mixed_experts_over_single": ba["mixed_experts_over_single"],
        "targets": TARGETS,
        "bound": bound,
        "unbatched": un,
        "batched": ba,
        "trunk": str(trunk_dir),
        "domains": len(domains),
        "expert_rank": args.expert_rank,
        "trunk_dtype": args.trunk_dtype,
        "expert_params": stores.expert_params,
        "scoring_texts": len(texts),
        "text_chars": args.text_chars,
        "prompt_chars": args.prompt_chars,
        "seconds_per_phase": args.seconds,
        "warmup_s": args.warmup,
        "workers": args.workers,
        "cpus": cores,
        # both servers inherit it: PASSIVE cost batched generation ~25 % here (docs/deployment.md)
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "loadavg_before": load_before,
    }
    load_after = parts.loadavg()
    top["loadavg_after"] = load_after
    top["others_cores_busy_before"] = others_busy
    if others_busy is None:
        top["machine_busy"] = load_before[0] > 0.5 * cores  # after: the bench's own load
    else:
        top["machine_busy"] = others_busy > 0.25
    top["commit"] = parts.commit()
    top["date"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    print(json.dumps(top))


if __name__ == "__main__":
    main()
