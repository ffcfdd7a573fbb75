"""The machine's limits, measured in the same run as the brokers.

- loopback TCP: bulk throughput of one sender and one receiver over 127.0.0.1, and the round
  trip of a 200-byte ping-pong (the floor under any acknowledged request);
- the data disk: page-cache write throughput (no fsync), and writes each followed by fdatasync
  at the sizes the workloads make durable one at a time (one message, one window of 50, the
  messages a pipelined producer keeps in flight).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

from broker import loopback_tcp, page_cache_write

from .stats import MB, latency_summary


def loopback_round_trip(count: int, size: int = 200) -> dict[str, Any]:
    listener = socket.create_server(("127.0.0.1", 0))

    def echo() -> None:
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while data := _recv_exactly(conn, size):
            conn.sendall(data)
        conn.close()

    thread = threading.Thread(target=echo)
    thread.start()
    client = socket.create_connection(listener.getsockname())
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    message, samples = b"x" * size, []
    started = time.perf_counter()
    for _ in range(count):
        sent = time.perf_counter_ns()
        client.sendall(message)
        _recv_exactly(client, size)
        samples.append((time.perf_counter_ns() - sent) / 1e6)
    seconds = time.perf_counter() - started
    client.close()
    thread.join()
    listener.close()
    return {
        "message_bytes": size,
        "round_trips_per_s": round(count / seconds),
        **latency_summary(samples),
    }


def _recv_exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            return b""
        data += chunk
    return data


def fsync_writes(directory: Path, size: int, seconds: float) -> dict[str, Any]:
    """Appends of `size` bytes, each followed by fdatasync, for `seconds`."""
    path = directory / f"physical-fsync-{size}"
    data = os.urandom(size)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    samples: list[float] = []
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        begun = time.perf_counter_ns()
        os.write(fd, data)
        os.fdatasync(fd)
        samples.append((time.perf_counter_ns() - begun) / 1e6)
    elapsed = time.perf_counter() - started
    os.close(fd)
    path.unlink()
    return {
        "write_bytes": size,
        "writes_per_s": round(len(samples) / elapsed),
        "mb_per_s": round(len(samples) * size / elapsed / MB, 2),
        **latency_summary(samples),
    }


def measure(directory: Path, *, bulk_bytes: int, seconds: float, sizes: list[int]) -> dict:
    """All of the above; `sizes` are the byte counts to measure fsync'd appends at."""
    return {
        "loopback_tcp": loopback_tcp(bulk_bytes),
        "loopback_round_trip": loopback_round_trip(max(1000, int(seconds * 5000))),
        "page_cache_write": page_cache_write(directory, bulk_bytes),
        "fsync_write": {str(size): fsync_writes(directory, size, seconds) for size in sizes},
        "data_directory": str(directory),
    }
