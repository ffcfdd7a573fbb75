"""ClientQuotaManager: which entity's quota applies to a (user, client id) in Kafka's order,
which clients share a rate, and the throttle a client over its quota gets; on fake time."""

from __future__ import annotations

import asyncio
import time

import pytest

from weir.broker.client_quotas import (
    BusyTime,
    ClientQuotaManager,
    ClientQuotas,
    busy_percentage,
)
from weir.broker.quota_rate import QuotaWindow
from weir.clock import FakeClock
from weir.cluster.client_quota_configs import QuotaConfigs, QuotaEntity
from weir.cluster.znodes import DEFAULT_ENTITY as D

WINDOW = QuotaWindow(samples=11, size_ms=1000)


def manager(bounds: dict[QuotaEntity, float]) -> tuple[ClientQuotaManager, FakeClock]:
    clock = FakeClock()
    quotas = ClientQuotaManager("producer_byte_rate", WINDOW, clock, 2**31 - 1)
    quotas.update(bounds)
    return quotas, clock


#: one entity of each of Kafka's eight levels, bound to its level's number
LEVELS = {
    QuotaEntity("alice", "app"): 1.0,
    QuotaEntity("alice", D): 2.0,
    QuotaEntity("alice"): 3.0,
    QuotaEntity(D, "app"): 4.0,
    QuotaEntity(D, D): 5.0,
    QuotaEntity(D): 6.0,
    QuotaEntity(None, "app"): 7.0,
    QuotaEntity(None, D): 8.0,
}


@pytest.mark.parametrize("level", range(1, 9))
def test_the_most_specific_entity_wins(level: int) -> None:
    bounds = {e: b for e, b in LEVELS.items() if b >= level}
    quotas, _ = manager(bounds)
    quota = quotas.quota("alice", "app")
    assert quota is not None and quota[1] == level


def test_no_matching_entity_means_no_quota_and_no_throttle() -> None:
    quotas, _ = manager({QuotaEntity("bob"): 1.0})
    assert quotas.quota("alice", "app") is None
    assert quotas.record("alice", "app", 10**9) == 0


def test_a_user_quota_is_shared_by_its_client_ids() -> None:
    quotas, _ = manager({QuotaEntity("alice"): 1000.0})
    assert quotas.record("alice", "one", 10_000) == 0  # 1000 B/s over the 10 s minimum window
    assert quotas.record("alice", "two", 5_000) == 5000


def test_throttles_given_are_counted_per_client_for_the_metrics() -> None:
    quotas, _ = manager({QuotaEntity("alice"): 1000.0})
    assert quotas.record("alice", "one", 10_000) == 0
    assert quotas.record("alice", "two", 5_000) == 5000
    assert quotas.record("alice", "two", 0) == 5000
    assert quotas.throttled == {("alice", "two"): [2, 10_000]}


def test_default_client_quota_is_per_client_id() -> None:
    quotas, _ = manager({QuotaEntity(None, D): 1000.0})
    assert quotas.record("alice", "one", 10_000) == 0
    assert quotas.record("alice", "two", 10_000) == 0
    assert quotas.record("bob", "one", 5_000) == 5000  # client id "one" is over, whoever sends


def test_throttle_is_kafkas_and_clears_as_the_window_moves_on() -> None:
    quotas, clock = manager({QuotaEntity(None, "app"): 1000.0})
    assert quotas.record("ANONYMOUS", "app", 15_000) == 5000
    clock.advance(5000)  # still within the minimum window of 10 s: 15 kB over 10 s
    assert quotas.record("ANONYMOUS", "app", 0) == 5000
    clock.advance(6000)  # the burst's sample is older than all 11 windows
    assert quotas.record("ANONYMOUS", "app", 0) == 0


def test_clients_idle_for_all_the_windows_are_forgotten() -> None:
    quotas, clock = manager({QuotaEntity(None, D): 1000.0})
    for client_id in ("a", "b", "c"):
        quotas.record("u", client_id, 100)
    assert quotas.clients_measured == 3
    clock.advance(6000)
    quotas.record("u", "a", 100)
    clock.advance(6000)  # b and c: 12 s idle; a: 6 s
    quotas.record("u", "d", 100)
    assert quotas.clients_measured == 2
    # a's 100 bytes of 6 s ago were kept: 10 kB over the 10 s minimum, then 11 kB
    assert quotas.record("u", "a", 9_900) == 0
    assert quotas.record("u", "a", 1_000) == 1000


def test_unrecord_takes_a_value_back() -> None:
    quotas, _ = manager({QuotaEntity(None, "app"): 1000.0})
    assert quotas.record("u", "app", 15_000) == 5000
    quotas.unrecord("u", "app", 15_000)
    assert quotas.record("u", "app", 0) == 0


def test_max_value_in_window_is_the_bound_over_all_but_one_window() -> None:
    quotas, _ = manager({QuotaEntity(None, "app"): 1000.0})
    assert quotas.max_value_in_window("u", "app") == 10_000
    assert quotas.max_value_in_window("u", "other") is None


def test_without_quotas_nothing_is_measured() -> None:
    quotas, _ = manager({})
    assert not quotas.enabled
    assert quotas.record("u", "app", 10**12) == 0


class Store:
    def __init__(self, configs: QuotaConfigs) -> None:
        self.current = configs

    def configs(self) -> QuotaConfigs:
        return self.current

    def alter(self, entity: QuotaEntity, change: object) -> dict[str, str]:
        raise NotImplementedError


def test_each_quota_type_is_taken_from_the_configs_on_its_own() -> None:
    store = Store({
        QuotaEntity("alice"): {"producer_byte_rate": "1024", "SCRAM-SHA-512": "salt=..."},
        QuotaEntity(None, "app"): {"consumer_byte_rate": "2048", "request_percentage": "50.0"},
    })  # fmt: skip
    quotas = ClientQuotas(store, WINDOW, FakeClock())
    assert quotas.produce.quota("alice", "app") == (("alice", ""), 1024.0)
    assert quotas.fetch.quota("alice", "app") == (("", "app"), 2048.0)
    assert quotas.request.quota("alice", "app") == (("", "app"), 50.0)
    store.current = {}
    quotas.reload()
    assert not quotas.produce.enabled and not quotas.fetch.enabled


def test_busy_time_counts_running_not_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    """The handler runs 5 + 7 units of time; 1000 pass while it waits."""
    now = [0]
    monkeypatch.setattr(time, "perf_counter_ns", lambda: now[0])

    async def handler() -> str:
        now[0] += 5
        await asyncio.sleep(0)
        now[0] += 7
        return "done"

    async def elsewhere() -> None:
        now[0] += 1000

    async def main() -> tuple[str, int]:
        timed = BusyTime(handler())
        other = asyncio.get_running_loop().create_task(elsewhere())
        result = await timed
        await other
        return result, timed.busy_ns

    assert asyncio.run(main()) == ("done", 12)
    assert busy_percentage(10_000_000) == 1.0


def test_busy_time_hands_cancellation_to_the_coroutine() -> None:
    cancelled = []

    async def handler() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def main() -> None:
        task = asyncio.ensure_future(BusyTime(handler()))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert cancelled == [True]
