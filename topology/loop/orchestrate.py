"""Run the whole loop as supervised processes: the orchestration behind `worx demo` and
`worx up`. Wiring only; every algorithm runs inside the stage processes it starts.

Stages, each its own process (so each can fail and restart alone):
route, discover, trainer, serve (``[serve] replicas`` of it behind one front), monitor, plus
a feed (a file replay for the demo, `worx connect` on the company's topics for `worx up`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.live import Live

from router.table_file import FILE as DOMAINS_FILE
from router.table_file import SavedTable, write_table
from topology.composition.embedded_broker import free_port
from topology.composition.run_dir import write_run_file
from topology.composition.topics import Topics
from topology.loop.live_view import LiveView
from topology.loop.supervisor import ChildSpec, Supervisor, worx_argv
from topology.loop.watcher import LoopState, LoopWatcher
from topology.runtimes.table_follower import TableFollower
from topology.serve.front import ServeFront
from worx.web import HttpLimits

log = logging.getLogger(__name__)

STAGE_CONNECT_TIMEOUT_S = 300.0  # the supervised stages' kafka.connect_timeout_s


@dataclass
class LoopOptions:
    bootstrap_servers: str
    run_dir: Path  # data_dir of this run: expert store, snapshots, monitor state, logs
    trunk_dir: Path
    topic_prefix: str = "worx"
    config_path: str | None = None
    serve: bool = True
    monitor: bool = True
    baseline: bool = False  # the monitor also runs the dense sequential fine-tune baseline
    trainer_env: dict[str, str] = field(default_factory=dict)  # e.g. shorter training
    stage_env: dict[str, str] = field(default_factory=dict)  # WORX_* overrides for every stage
    host: str = "127.0.0.1"
    store_dir: Path | None = None  # where the stages' store is (None: <run_dir>/experts)
    monitor_dir: Path | None = None  # the monitor's state (None: <run_dir>/monitor)
    runtime: str = "plain"  # route + discover: "plain" (two processes) or "flink" (one job)
    trainers: int = 1  # trainer processes in one consumer group (trainer_children)
    max_restarts: int = 3  # per stage within ChildSpec.restart_window_s (chaos: more)
    serve_replicas: int = 1  # > 1: that many serve processes behind one front (serve_children)
    serve_limits: HttpLimits = field(default_factory=HttpLimits)  # the front's body limits


@dataclass
class RunningLoop:
    supervisor: Supervisor
    watcher: LoopWatcher
    dashboard_url: str | None
    serve_url: str | None
    started: float
    # keeps <run_dir>/domains.json (topology/composition/run_dir.py)
    domains: TableFollower | None = None
    front: ServeFront | None = None  # the serve address, with several serve replicas

    def stop(self) -> None:
        """Stop the serve front, every stage, the watcher and the table file's follower."""
        if self.front is not None:
            self.front.stop()  # first: its replicas stopping is no news to log
        self.supervisor.stop_all()
        self.watcher.stop()
        if self.domains is not None:
            self.domains.stop()


def stage_env(options: LoopOptions) -> dict[str, str]:
    env = {
        **os.environ,
        "WORX_KAFKA__BOOTSTRAP_SERVERS": options.bootstrap_servers,
        "WORX_KAFKA__TOPIC_PREFIX": options.topic_prefix,
        "WORX_DATA_DIR": str(options.run_dir),
        "WORX_EXPERTS__TRUNK_DIR": str(options.trunk_dir),
        **options.stage_env,
    }
    if options.config_path:
        env["WORX_CONFIG"] = options.config_path
    # several torch processes share the machine's cores: idle OpenMP threads sleep instead of
    # spinning on a core another stage needs (the user's own setting wins)
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    # the loop reached the cluster before it started a stage: a stage restarted while the
    # cluster is away (a broker restarting, paused, partitioned) waits for it instead of
    # exiting after the one-line error's 10 s, again and again through its restart budget
    env.setdefault("WORX_KAFKA__CONNECT_TIMEOUT_S", str(STAGE_CONNECT_TIMEOUT_S))
    return env


def start_loop(options: LoopOptions, conf: dict) -> RunningLoop:
    """Start every stage process and the watcher; the caller feeds documents and waits."""
    options.run_dir.mkdir(parents=True, exist_ok=True)
    write_run_file(
        options.run_dir,
        options.trunk_dir,
        options.store_dir or options.run_dir / "experts",
        options.monitor_dir or options.run_dir / "monitor",
    )
    supervisor = Supervisor(options.run_dir / "logs", base_env=stage_env(options))
    watcher = LoopWatcher(conf, Topics(options.topic_prefix)).start()
    # the domain table kept in the run, so the finished run routes with no broker
    saved = SavedTable(options.run_dir / DOMAINS_FILE)
    write_table(saved.path, saved.table)  # a run that found no domain yet is still a run
    domains = TableFollower(
        conf,
        Topics(options.topic_prefix).domains,
        saved.apply,
        dead_letters=False,  # the stages dead-letter the rows they refuse
        name="run-domains",
        lookup=lambda row: saved.table.get(row.domain_id),
    ).start()
    restarts = options.max_restarts
    for spec in route_and_discover(options.runtime, restarts):
        supervisor.start(spec)
    for spec in trainer_children(options, usable_cores()):
        supervisor.start(spec)
    serve_url = dashboard_url = front = None
    if options.serve:
        specs, urls = serve_children(options)
        for spec in specs:
            supervisor.start(spec)
        serve_url = urls[0]
        if len(urls) > 1:
            front = ServeFront(urls, options.serve_limits)
            serve_url = front.start(options.host, 0)
    if options.monitor:
        port = free_port(options.host)
        dashboard_url = f"http://{options.host}:{port}/"
        argv = ["monitor", "--host", options.host, "--port", str(port)]
        argv.append("--baseline" if options.baseline else "--no-baseline")
        supervisor.start(ChildSpec("monitor", worx_argv(*argv), max_restarts=restarts))
    started = time.monotonic()
    return RunningLoop(supervisor, watcher, dashboard_url, serve_url, started, domains, front)


def serve_children(options: LoopOptions) -> tuple[list[ChildSpec], list[str]]:
    """``options.serve_replicas`` serve processes, ``serve``, ``serve-2``, ..., each on a
    free port of its own; returns them and their URLs. With more than one, the loop puts a
    :class:`ServeFront` on the serve address: one replica's restart is not an outage."""
    if options.serve_replicas < 1:
        raise ValueError(f"serve replicas must be >= 1, not {options.serve_replicas}")
    specs, urls = [], []
    for k in range(1, options.serve_replicas + 1):
        port = free_port(options.host)
        argv = worx_argv("serve", "--host", options.host, "--port", str(port))
        name = "serve" if k == 1 else f"serve-{k}"
        specs.append(ChildSpec(name, argv, max_restarts=options.max_restarts))
        urls.append(f"http://{options.host}:{port}")
    return specs, urls


def route_and_discover(runtime: str, max_restarts: int = 3) -> list[ChildSpec]:
    """The processes that route and discover: two plain Kafka loops, or one PyFlink job on
    a mini-cluster (``worx flink run``: a JVM and its Python workers in its process group)."""
    if runtime == "flink":
        # SIGTERM to the client alone: it cancels the job, then the JVM ends (a SIGTERM to
        # the whole group kills the JVM under the client, which then fails to cancel)
        flink = worx_argv("flink", "run")
        options = {"term_leader_only": True, "stop_timeout_s": 30.0}
        return [ChildSpec("flink", flink, max_restarts=max_restarts, **options)]
    if runtime != "plain":
        raise ValueError(f"unknown runtime {runtime!r}: plain or flink")
    return [
        ChildSpec(name, worx_argv(name), max_restarts=max_restarts)
        for name in ("route", "discover")
    ]


def usable_cores() -> int:
    """The cores this process may run on (its affinity, else the machine's)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def trainer_children(options: LoopOptions, cores: int) -> list[ChildSpec]:
    """``options.trainers`` trainer processes in one consumer group: ``trainer``,
    ``trainer-2``, ... (each its own log). With more than one, each gets ``cores // N``
    torch threads (``OMP_NUM_THREADS``, unless the environment sets it) so that they do
    not oversubscribe the cores, and the second on keep their job checkpoints apart
    (``<run_dir>/trainer-K/jobs``), as on machines of their own. ``<prefix>.train`` needs
    ``options.trainers`` partitions, or some trainers get no job."""
    if options.trainers < 1:
        raise ValueError(f"trainers must be >= 1, not {options.trainers}")
    argv = worx_argv("trainer", "--no-progress")
    restarts = options.max_restarts
    if options.trainers == 1:
        return [ChildSpec("trainer", argv, env=options.trainer_env, max_restarts=restarts)]
    threads = {}
    if "OMP_NUM_THREADS" not in {**os.environ, **options.stage_env, **options.trainer_env}:
        threads = {"OMP_NUM_THREADS": str(max(1, cores // options.trainers))}
    specs = [
        ChildSpec("trainer", argv, env={**threads, **options.trainer_env}, max_restarts=restarts)
    ]
    for k in range(2, options.trainers + 1):
        jobs = {"WORX_TRAINER__JOBS_DIR": str(options.run_dir / f"trainer-{k}" / "jobs")}
        env = {**threads, **jobs, **options.trainer_env}
        specs.append(ChildSpec(f"trainer-{k}", argv, env=env, max_restarts=restarts))
    return specs


def watch_live(
    loop: RunningLoop,
    done: Callable[[LoopState], bool],
    timeout_s: float,
    console: Console | None = None,
) -> bool:
    """Show the live view until ``done(state)`` holds, or ``timeout_s`` passes; restart crashed
    stages meanwhile. Returns whether ``done`` was reached."""
    console = console or Console()
    deadline = time.monotonic() + timeout_s
    reached = False
    view = LiveView(loop.started, loop.dashboard_url, loop.serve_url)
    with Live(console=console, refresh_per_second=2, transient=False) as live:
        while time.monotonic() < deadline:
            keep_loop_going(loop)
            stages = {
                name: ("up" if loop.supervisor.alive(name) else "done")
                for name in loop.supervisor.children
            }
            with loop.watcher.lock:
                live.update(view.render(loop.watcher.state, stages))
                if done(loop.watcher.state):
                    reached = True
                    break
            loop.watcher.wait_change(timeout_s=0.5)
    return reached


def keep_loop_going(loop: RunningLoop) -> None:
    """Restart the stages that crashed; raise if one used up its restarts or the loop's view
    of the topics (the watcher, the table file's follower) stopped."""
    for name in loop.supervisor.poll():
        if not loop.supervisor.children[name].spec.oneshot:
            raise StageFailed(name, loop.supervisor.children[name].log_path)
    if not loop.watcher.healthy():  # the view no longer follows the topics
        raise RuntimeError(f"{loop.watcher.describe()}; stopping every stage")
    if loop.domains is not None and not loop.domains.healthy():  # domains.json stale
        raise RuntimeError(f"{loop.domains.describe()}; stopping every stage")


class StageFailed(RuntimeError):
    def __init__(self, name: str, log_path: Path) -> None:
        tail = ""
        if log_path.exists():
            tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-15:])
        super().__init__(f"stage {name} failed and used up its restarts; last log lines:\n{tail}")
