"""NATS JetStream through nats-py: a file-storage stream with one replica, publish acks awaited."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from importlib.metadata import version
from typing import Any

import nats
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StorageType

from . import Run, elapsed_ms, payload, stamped, windows

FETCH = 1_000


class NatsDriver:
    def __init__(self, port: int) -> None:
        self.url = f"nats://127.0.0.1:{port}"
        self.settings: dict[str, Any] = {
            "client": f"nats-py {version('nats-py')}",
            "stream": {"storage": "file", "replicas": 1, "retention": "limits"},
            "publish": {
                "batch 1": "await js.publish per message",
                "window": "js.publish_async N messages, then gather all N acks",
                "pipelined": "js.publish_async every message on a context whose "
                "publish_async_max_pending is the workload's in_flight (recorded with it), so "
                "publish_async waits while that many acks are outstanding; then "
                "publish_async_completed(); error replies counted as failures",
            },
            "consume": {
                "consumer": "ephemeral pull, ack_policy none, deliver all",
                "fetch batch": FETCH,
            },
            "latency consumer": "ordered push consumer",
        }

    def prepare(self, name: str) -> None:
        asyncio.run(
            self._with_js(
                lambda js: js.add_stream(
                    name=name, subjects=[name], storage=StorageType.FILE, num_replicas=1
                )
            )
        )

    def drop(self, name: str) -> None:
        asyncio.run(self._with_js(lambda js: js.delete_stream(name)))

    async def _with_js(self, action: Any) -> Any:
        nc = await nats.connect(self.url)
        try:
            return await action(nc.jetstream())
        finally:
            await nc.close()

    def produce(self, name: str, count: int, size: int, batch: int, deadline: float) -> Run:
        return asyncio.run(self._produce(name, count, payload(size), batch, deadline))

    async def _produce(
        self, name: str, count: int, body: bytes, batch: int, deadline: float
    ) -> Run:
        nc = await nats.connect(self.url)
        js = nc.jetstream()
        acked = 0
        started = time.perf_counter()
        for n in windows(count, batch, deadline):
            if n == 1:
                await js.publish(name, body)
            else:
                futures = [await js.publish_async(name, body) for _ in range(n)]
                await asyncio.gather(*futures)
            acked += n
        seconds = time.perf_counter() - started
        await nc.close()
        return Run(acked, seconds)

    def pipelined(self, name: str, count: int, size: int, in_flight: int, deadline: float) -> Run:
        return asyncio.run(self._pipelined(name, count, payload(size), in_flight, deadline))

    async def _pipelined(
        self, name: str, count: int, body: bytes, in_flight: int, deadline: float
    ) -> Run:
        nc = await nats.connect(self.url)
        js = nc.jetstream(publish_async_max_pending=in_flight)
        outcome = [0, 0]  # acknowledged, failed

        def settled(future: asyncio.Future[Any]) -> None:
            outcome[future.cancelled() or future.exception() is not None] += 1

        started = time.perf_counter()
        for n in range(count):
            if n % 1_000 == 0 and time.monotonic() > deadline:
                break
            future = await js.publish_async(name, body)
            future.add_done_callback(settled)
        await asyncio.wait_for(js.publish_async_completed(), 60)
        seconds = time.perf_counter() - started
        await nc.close()
        return Run(outcome[0], seconds, failed=outcome[1])

    def consume(self, name: str, expected: int, deadline: float) -> Run:
        return asyncio.run(self._consume(name, expected, deadline))

    async def _consume(self, name: str, expected: int, deadline: float) -> Run:
        nc = await nats.connect(self.url)
        js = nc.jetstream()
        config = ConsumerConfig(ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL)
        subscription = await js.pull_subscribe(name, stream=name, config=config)
        got = 0
        started = time.perf_counter()
        while got < expected and time.monotonic() < deadline:
            try:
                got += len(await subscription.fetch(min(FETCH, expected - got), timeout=1))
            except nats.errors.TimeoutError:
                continue
        seconds = time.perf_counter() - started
        await nc.close()
        return Run(got, seconds)

    def latency(self, name: str, rate: int, seconds: float) -> list[float]:
        return asyncio.run(self._latency(name, rate, seconds))

    async def _latency(self, name: str, rate: int, seconds: float) -> list[float]:
        receiver = await nats.connect(self.url)
        samples: list[float] = []

        async def on_message(message: Any) -> None:
            samples.append(elapsed_ms(message.data))

        await receiver.jetstream().subscribe(name, cb=on_message, ordered_consumer=True)
        sender = await nats.connect(self.url)
        js = sender.jetstream()
        async for _ in _paced(rate, seconds):
            await js.publish(name, stamped(200))
        waited = time.monotonic() + 10
        while len(samples) < int(rate * seconds) and time.monotonic() < waited:
            await asyncio.sleep(0.01)
        await sender.close()
        await receiver.close()
        return samples


async def _paced(rate: int, seconds: float) -> AsyncIterator[int]:
    """`paced` for an event loop: waits without blocking the loop, so receipts are timed at once."""
    started = time.perf_counter()
    for n in range(int(rate * seconds)):
        delay = started + n / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        yield n
