from __future__ import annotations

import asyncio
import logging

import pytest

from weir.broker.connections import ConnectionLimiter, RequestMemoryPool
from weir.clock import FakeClock


def test_limits_per_ip_and_overall_are_counted_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    limiter = ConnectionLimiter(max_connections=5, max_per_ip=3, clock=FakeClock())
    with caplog.at_level(logging.WARNING):
        assert [limiter.admit("10.0.0.1") for _ in range(4)] == [True, True, True, False]
        assert [limiter.admit("10.0.0.2") for _ in range(3)] == [True, True, False]
    assert limiter.open == 5 and limiter.refused == 2
    assert "refused connection from 10.0.0.1: max.connections.per.ip=3" in caplog.text
    limiter.release("10.0.0.1")
    assert limiter.admit("10.0.0.2") and not limiter.admit("10.0.0.3")


def test_refusals_are_logged_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    limiter = ConnectionLimiter(max_connections=0, max_per_ip=10, clock=clock)
    with caplog.at_level(logging.WARNING):
        for _ in range(50):
            limiter.admit("127.0.0.1")
        clock.advance(10_000)
        limiter.admit("127.0.0.1")
    assert caplog.text.count("refused connection") == 2
    assert "51 in all" in caplog.text


def test_the_request_budget_is_shared_first_come_first_served() -> None:
    async def scenario() -> list[str]:
        pool = RequestMemoryPool(100)
        order: list[str] = []

        async def take(name: str, size: int, hold: asyncio.Event) -> None:
            await pool.acquire(size)
            order.append(name)
            await hold.wait()
            pool.release(size)

        holds = {name: asyncio.Event() for name in "abcd"}
        tasks = [asyncio.create_task(take("a", 60, holds["a"]))]
        await asyncio.sleep(0)
        tasks.append(asyncio.create_task(take("b", 70, holds["b"])))
        await asyncio.sleep(0)
        tasks.append(asyncio.create_task(take("c", 10, holds["c"])))
        await asyncio.sleep(0)
        assert order == ["a"] and pool.used == 60  # c would fit, but b came first
        holds["a"].set()
        await asyncio.sleep(0.01)
        assert order == ["a", "b", "c"] and pool.used == 80
        holds["b"].set()
        holds["c"].set()
        await asyncio.gather(*tasks)
        assert pool.used == 0
        return order

    asyncio.run(scenario())


def test_a_cancelled_waiter_gives_its_turn_away() -> None:
    async def scenario() -> None:
        pool = RequestMemoryPool(100)
        await pool.acquire(90)
        big = asyncio.create_task(pool.acquire(50))
        small = asyncio.create_task(pool.acquire(10))
        await asyncio.sleep(0)
        big.cancel()
        await asyncio.wait_for(small, 1)
        assert big.cancelled() and pool.used == 100
        with pytest.raises(ValueError):
            await pool.acquire(101)

    asyncio.run(scenario())
