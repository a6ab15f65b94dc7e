"""`worx demo --keep-serving`: serve a finished run from its files until Ctrl-C.

After the loop stopped (broker, route, discover, trainer gone), two supervised processes
read the run directory and nothing else: ``worx serve --run DIR`` (the experts, routed by
the run's domain table) and ``worx monitor --no-stream`` (the dashboard from the monitor's
history). They take the ports the run's own serve and dashboard had, so the URLs shown
during the run answer again; a port taken meanwhile gets a free one (and is printed).
"""

from __future__ import annotations

import signal
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from topology.composition.embedded_broker import free_port
from topology.composition.run_dir import open_run
from topology.loop.supervisor import ChildSpec, Supervisor, worx_argv


class ServingFailed(RuntimeError):
    """A server of the finished run exited or did not answer in time (with its log)."""


@dataclass
class FinishedRunServers:
    supervisor: Supervisor
    serve_url: str
    dashboard_url: str

    def stop(self) -> None:
        self.supervisor.stop_all()


def start(
    run_dir: Path,
    host: str = "127.0.0.1",
    serve_url: str | None = None,
    dashboard_url: str | None = None,
    env: dict[str, str] | None = None,
) -> FinishedRunServers:
    """Start ``worx serve --run`` and the dashboard on the run (ports of the given URLs when
    free); returns at once (see :func:`wait_ready`)."""
    run = open_run(run_dir)
    serve_port = _port(serve_url, host)
    dashboard_port = _port(dashboard_url, host)
    supervisor = Supervisor(Path(run_dir) / "logs", base_env=env)
    serve = ["serve", "--run", str(run_dir), "--host", host, "--port", str(serve_port)]
    supervisor.start(ChildSpec("serve-run", worx_argv(*serve)))
    monitor = ["monitor", "--no-stream", "--no-baseline", "--state-dir", str(run.monitor_dir)]
    monitor += ["--host", host, "--port", str(dashboard_port)]
    supervisor.start(ChildSpec("dashboard", worx_argv(*monitor)))
    return FinishedRunServers(
        supervisor, f"http://{host}:{serve_port}", f"http://{host}:{dashboard_port}/"
    )


def wait_ready(servers: FinishedRunServers, timeout_s: float = 180.0) -> None:
    """Until both answer HTTP (any status: a token may be required).

    Raises:
        ServingFailed: a server exited, or neither answered within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    waiting = {"serve-run": f"{servers.serve_url}/health", "dashboard": servers.dashboard_url}
    while waiting:
        for name, url in list(waiting.items()):
            if _answers(url):
                del waiting[name]
            elif servers.supervisor.exit_code(name) is not None:
                raise ServingFailed(_failure(servers, name, "exited"))
        if waiting and time.monotonic() > deadline:
            raise ServingFailed(_failure(servers, next(iter(waiting)), "did not answer"))
        if waiting:
            time.sleep(0.3)


def serve_until_stopped(servers: FinishedRunServers) -> None:
    """Block until Ctrl-C or SIGTERM (a crashed server is restarted by the supervisor; one
    that used up its restarts ends the wait with :class:`ServingFailed`), then stop both."""
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(1.0):
            ended = servers.supervisor.poll()
            if ended:
                raise ServingFailed(_failure(servers, ended[0], "exited"))
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        servers.stop()


def _port(url: str | None, host: str) -> int:
    """The port of ``url`` if it can be bound now, else a free one."""
    import socket

    port = urlsplit(url).port if url else None
    if port:
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
                return port
            except OSError:
                pass
    return free_port(host)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5):
            return True
    except urllib.error.HTTPError:
        return True  # it answered (401 with a token set, 503 ...)
    except (urllib.error.URLError, OSError):
        return False


def _failure(servers: FinishedRunServers, name: str, what: str) -> str:
    child = servers.supervisor.children[name]
    tail = ""
    if child.log_path.exists():
        tail = "\n".join(child.log_path.read_text(errors="replace").splitlines()[-10:])
    return f"{name} {what} (log {child.log_path}); last lines:\n{tail}"
