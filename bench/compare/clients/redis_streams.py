"""Redis Streams through redis-py: XADD (pipelined in windows), XRANGE to read, XREAD BLOCK to
wait for new entries.

redis-py sends a pipeline and reads all its replies before it can send another on the same
connection, so its pipelined producer is one pipeline of `in_flight` XADD per round trip."""

from __future__ import annotations

import threading
import time
from typing import Any

import redis

from . import Run, elapsed_ms, paced, payload, stamped, windows

RANGE = 10_000
FIELD = b"v"


class RedisDriver:
    def __init__(self, port: int) -> None:
        self.port = port
        self.settings: dict[str, Any] = {
            "client": f"redis-py {redis.__version__} (pure-Python parser)",
            "publish": {
                "batch 1": "XADD, reply awaited",
                "window": "pipeline (transaction=False) of N XADD, replies awaited",
                "pipelined": "pipelines (transaction=False) of as many XADD as the workload's "
                "in_flight (recorded with it), one per round trip: redis-py cannot have two "
                "pipelines in flight on one connection, so each pipeline's replies are read "
                "before the next is sent; error replies counted as failures",
            },
            "consume": {"command": "XRANGE", "count": RANGE},
            "latency consumer": "XREAD BLOCK 100 from the last id",
            "entry": "one field, 'v'",
        }

    def _client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port)

    def prepare(self, name: str) -> None:
        self._client().delete(name)

    def drop(self, name: str) -> None:
        self._client().delete(name)

    def produce(self, name: str, count: int, size: int, batch: int, deadline: float) -> Run:
        client = self._client()
        client.ping()
        fields = {FIELD: payload(size)}
        sent = 0
        started = time.perf_counter()
        for n in windows(count, batch, deadline):
            if n == 1:
                client.xadd(name, fields)  # type: ignore[arg-type]
            else:
                pipe = client.pipeline(transaction=False)
                for _ in range(n):
                    pipe.xadd(name, fields)  # type: ignore[arg-type]
                pipe.execute()
            sent += n
        return Run(sent, time.perf_counter() - started)

    def pipelined(self, name: str, count: int, size: int, in_flight: int, deadline: float) -> Run:
        client = self._client()
        client.ping()
        fields = {FIELD: payload(size)}
        acknowledged = failed = 0
        started = time.perf_counter()
        for n in windows(count, in_flight, deadline):
            pipe = client.pipeline(transaction=False)
            for _ in range(n):
                pipe.xadd(name, fields)  # type: ignore[arg-type]
            replies = pipe.execute(raise_on_error=False)
            errors = sum(isinstance(reply, Exception) for reply in replies)
            acknowledged += n - errors
            failed += errors
        return Run(acknowledged, time.perf_counter() - started, failed=failed)

    def consume(self, name: str, expected: int, deadline: float) -> Run:
        client = self._client()
        client.ping()
        got, start = 0, b"-"
        started = time.perf_counter()
        while got < expected and time.monotonic() < deadline:
            entries = client.xrange(name, start, "+", count=RANGE)
            if not entries:
                break
            got += len(entries)
            start = b"(" + entries[-1][0]
        return Run(got, time.perf_counter() - started)

    def latency(self, name: str, rate: int, seconds: float) -> list[float]:
        samples: list[float] = []
        total = int(rate * seconds)
        stop = threading.Event()

        def receive() -> None:
            client, last = self._client(), b"0-0"
            while len(samples) < total and not stop.is_set():
                for _stream, entries in client.xread({name: last}, block=100) or []:
                    for entry_id, fields in entries:
                        samples.append(elapsed_ms(fields[FIELD]))
                        last = entry_id

        receiver = threading.Thread(target=receive)
        receiver.start()
        sender = self._client()
        try:
            for _ in paced(rate, seconds):
                sender.xadd(name, {FIELD: stamped(200)})
            receiver.join(timeout=10)
        finally:
            stop.set()
            receiver.join()
        return samples
