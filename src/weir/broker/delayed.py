"""Requests that wait on partitions (Kafka's DelayedFetch and DelayedProduce): a fetch until
data arrives at one of its partitions, an acks=all produce until the ISR has its records. Each
parks a future on the partitions (`Partition.waiters`, `Partition.follower_waiters`,
`Partition.produce_waiters`) that the partition's owner resolves: no polling.

Thread-safety (docs/threads.md): event-loop only, as `Partition`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from kio.schema.errors import ErrorCode

from weir.broker.partition import Partition


async def wait_for_data(
    partitions: Sequence[Partition], timeout_ms: int, *, follower: bool = False
) -> None:
    """Until something is appended to one of `partitions` (or one changes role or goes
    offline, or, unless a `follower` waits, its high watermark moves), or `timeout_ms`
    passes."""
    waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    for partition in partitions:
        _waiters(partition, follower).append(waiter)
    try:
        async with asyncio.timeout(timeout_ms / 1000):
            await waiter
    except TimeoutError:
        pass
    finally:
        for partition in partitions:
            waiters = _waiters(partition, follower)
            if waiter in waiters:
                waiters.remove(waiter)


def _waiters(partition: Partition, follower: bool) -> list[asyncio.Future[None]]:
    return partition.follower_waiters if follower else partition.waiters


async def wait_replicated(partition: Partition, end_offset: int, timeout_ms: int) -> ErrorCode:
    """For acks=all on a partition this broker leads: wait until every ISR member has the
    records before `end_offset`, then check the ISR is still large enough."""
    if not partition.replicated(end_offset):
        future: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        partition.produce_waiters.append((end_offset, future))
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                error = await future
        except TimeoutError:
            return ErrorCode.request_timed_out
        if error is not ErrorCode.none:
            return error
    if partition.isr_size < partition.log.config.min_insync_replicas:
        return ErrorCode.not_enough_replicas_after_append
    return ErrorCode.none


async def wait_synced(partition: Partition, end_offset: int, timeout_ms: int) -> ErrorCode:
    """For acks=all when the batch made a flush due (`flush.messages`): wait for the storage
    thread's flush to cover `end_offset`. Fetches parked meanwhile are woken, since under
    `high.watermark.policy=flushed` the flush moved the high watermark."""
    loop = asyncio.get_running_loop()
    flushed: asyncio.Future[bool] = loop.create_future()
    partition.log.when_flushed(
        end_offset, lambda ok: loop.call_soon_threadsafe(_settle, flushed, ok)
    )
    try:
        async with asyncio.timeout(timeout_ms / 1000):
            synced = await flushed
    except TimeoutError:
        return ErrorCode.request_timed_out
    partition.wake_waiters()
    return ErrorCode.none if synced else ErrorCode.kafka_storage_error


def _settle(future: asyncio.Future[bool], result: bool) -> None:
    if not future.done():
        future.set_result(result)
