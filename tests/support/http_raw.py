"""Raw-socket HTTP for the hostile request tests: bytes out, whatever comes back, timed.

Malformed requests cannot be sent through an HTTP client library, so these helpers write
the bytes themselves and read until the server answers or closes.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from dataclasses import dataclass


@dataclass
class Answer:
    status: int | None  # None: the server closed (or reset) without an answer
    headers: dict[str, str]
    body: bytes
    elapsed_s: float
    closed: bool  # the server closed the connection after answering

    def json(self) -> dict:
        return json.loads(self.body)


def parse(data: bytes) -> tuple[int | None, dict[str, str], bytes]:
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        return None, {}, b""
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = headers.get("content-length")
    return status, headers, body[: int(length)] if length is not None else body


def _complete(data: bytes) -> bool:
    status, headers, body = parse(data)
    length = headers.get("content-length")
    return status is not None and length is not None and len(body) >= int(length)


def exchange(
    port: int,
    data: bytes,
    *,
    timeout_s: float = 20.0,
    then: bytes | None = None,
    wait_close: bool = False,
) -> Answer:
    """Send ``data`` (and ``then``, ignoring a server that stopped reading); read the answer.

    ``wait_close``: keep reading after the answer until the server closes the connection.
    """
    start = time.monotonic()
    received = b""
    closed = False
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        try:
            sock.sendall(data)
            if then is not None:
                sock.sendall(then)
        except OSError:  # the server answered and closed before taking all of it
            pass
        deadline = start + timeout_s
        while time.monotonic() < deadline:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            except OSError:
                closed = True
                break
            if not chunk:
                closed = True
                break
            received += chunk
            if _complete(received) and not wait_close:
                break
    status, headers, body = parse(received)
    return Answer(status, headers, body, time.monotonic() - start, closed)


def request(
    method: str,
    path: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    host: str = "127.0.0.1",
) -> bytes:
    """The bytes of a well-formed HTTP/1.1 request (closing the connection after it)."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", "Connection: close"]
    if body or method == "POST":
        lines.append(f"Content-Length: {len(body)}")
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def async_exchange(port: int, data: bytes, timeout_s: float) -> Answer:
    """:func:`exchange` on asyncio streams, for hundreds of concurrent connections."""
    start = time.monotonic()
    received = b""
    closed = False
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return Answer(None, {}, b"", time.monotonic() - start, True)
    try:
        writer.write(data)
        async with asyncio.timeout(timeout_s):
            while True:
                chunk = await reader.read(65536)
                if not chunk:
                    closed = True
                    break
                received += chunk
                if _complete(received):
                    break
    except (TimeoutError, OSError):
        pass
    finally:
        writer.close()
    status, headers, body = parse(received)
    return Answer(status, headers, body, time.monotonic() - start, closed)


def flood(port: int, requests: list[bytes], timeout_s: float) -> list[Answer]:
    """Open one connection per request, all at once, and collect every answer."""

    async def run() -> list[Answer]:
        return await asyncio.gather(*(async_exchange(port, r, timeout_s) for r in requests))

    return asyncio.run(run())
