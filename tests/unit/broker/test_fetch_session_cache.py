"""The broker's fetch session cache (KIP-227): what each pair of session id and epoch means,
the session errors, what an incremental response carries, and which session gives up its slot
when the cache is full."""

from __future__ import annotations

import random
from pathlib import Path

from kio.schema.errors import ErrorCode

from weir.broker.fetch_sessions import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    MAX_EPOCH,
    FetchContext,
    FetchSessionCache,
    new_context,
    next_epoch,
)
from weir.broker.results import FetchRequestPartition, FetchResult
from weir.storage import FileSlice

TOPIC = "orders"
MAX_BYTES = 1 << 20


def wanted(*indexes: int, offset: int = 0, topic: str = TOPIC) -> list[FetchRequestPartition]:
    return [FetchRequestPartition(topic, i, offset, MAX_BYTES) for i in indexes]


def result(index: int, hw: int = 10, *, size: int = 0, lso: int = -1, log_start: int = 0,
           error: ErrorCode = ErrorCode.none, topic: str = TOPIC) -> FetchResult:  # fmt: skip
    data = FileSlice(-1, Path("x"), 0, size, 0, 0) if size else None
    return FetchResult(topic, index, error, hw, log_start, data, last_stable_offset=lso)


def context(
    cache: FetchSessionCache,
    session_id: int,
    epoch: int,
    requested: list[FetchRequestPartition] | None = None,
    forgotten: list[tuple[str, int]] | None = None,
    *,
    privileged: bool = False,
    now_ms: int = 0,
) -> FetchContext:
    return new_context(cache, session_id=session_id, epoch=epoch, requested=requested or [],
                       forgotten=forgotten or [], privileged=privileged, now_ms=now_ms)  # fmt: skip


def opened(cache: FetchSessionCache, *indexes: int, privileged: bool = False,
           now_ms: int = 0) -> FetchContext:  # fmt: skip
    """A session of `indexes`, its full response (every partition at hw 10) given."""
    ctx = context(cache, 0, INITIAL_EPOCH, wanted(*indexes), privileged=privileged,
                  now_ms=now_ms)  # fmt: skip
    assert ctx.session is not None
    ctx.select([result(i) for i in indexes])
    return ctx


def indexes(results: list[FetchResult]) -> list[int]:
    return [r.partition for r in results]


# ---- session id and epoch -------------------------------------------------------------------


def test_epoch_minus_one_without_a_session_is_a_sessionless_full_fetch() -> None:
    cache = FetchSessionCache()
    ctx = context(cache, 0, FINAL_EPOCH, wanted(0, 1))
    assert ctx.session_id == 0 and ctx.wanted == wanted(0, 1) and len(cache) == 0
    assert indexes(ctx.select([result(0), result(1)])) == [0, 1]


def test_epoch_zero_opens_a_session_whose_next_epoch_is_one() -> None:
    cache = FetchSessionCache()
    ctx = context(cache, 0, INITIAL_EPOCH, wanted(0, 1))
    assert ctx.session is not None and ctx.session_id != 0
    assert ctx.session.epoch == 1 and len(cache) == 1
    assert indexes(ctx.select([result(0), result(1)])) == [0, 1]  # a full response: all


def test_incremental_request_reads_every_session_partition_with_remembered_offsets() -> None:
    cache = FetchSessionCache()
    session_id = opened(cache, 0, 1, 2).session_id
    ctx = context(cache, session_id, 1, wanted(1, offset=7))
    assert ctx.incremental and ctx.error is ErrorCode.none
    assert [(w.partition, w.offset) for w in ctx.wanted] == [(0, 0), (1, 7), (2, 0)]


def test_unknown_session_id_is_fetch_session_id_not_found() -> None:
    cache = FetchSessionCache()
    opened(cache, 0)
    assert context(cache, 12345, 1).error is ErrorCode.fetch_session_id_not_found


def test_wrong_epoch_is_invalid_fetch_session_epoch_and_the_session_survives() -> None:
    cache = FetchSessionCache()
    session_id = opened(cache, 0).session_id
    assert context(cache, session_id, 2).error is ErrorCode.invalid_fetch_session_epoch
    assert context(cache, session_id, 1).error is ErrorCode.none
    assert context(cache, session_id, 1).error is ErrorCode.invalid_fetch_session_epoch  # replay
    assert context(cache, session_id, 2).error is ErrorCode.none


def test_final_epoch_closes_the_session() -> None:
    cache = FetchSessionCache()
    session_id = opened(cache, 0).session_id
    ctx = context(cache, session_id, FINAL_EPOCH, wanted(0))
    assert ctx.session_id == 0 and len(cache) == 0
    assert context(cache, session_id, 1).error is ErrorCode.fetch_session_id_not_found


def test_epoch_zero_naming_a_session_replaces_it() -> None:
    cache = FetchSessionCache()
    old = opened(cache, 0).session_id
    new = context(cache, old, INITIAL_EPOCH, wanted(0, 1)).session_id
    assert new not in (0, old) and len(cache) == 1
    assert context(cache, old, 1).error is ErrorCode.fetch_session_id_not_found


def test_forgetting_every_partition_ends_the_session() -> None:
    cache = FetchSessionCache()
    session_id = opened(cache, 0, 1).session_id
    ctx = context(cache, session_id, 1, forgotten=[(TOPIC, 0), (TOPIC, 1)])
    assert ctx.session_id == 0 and ctx.wanted == [] and len(cache) == 0


def test_added_updated_then_forgotten_partitions() -> None:
    cache = FetchSessionCache()
    session_id = opened(cache, 0, 1).session_id
    ctx = context(cache, session_id, 1, wanted(2, 1, offset=5), forgotten=[(TOPIC, 0)])
    assert [(w.partition, w.offset) for w in ctx.wanted] == [(1, 5), (2, 5)]


def test_epochs_wrap_to_one() -> None:
    assert next_epoch(0) == 1 and next_epoch(MAX_EPOCH) == 1 and next_epoch(-1) == -1


# ---- what an incremental response carries ---------------------------------------------------


def incremental(cache: FetchSessionCache, session_id: int, epoch: int) -> FetchContext:
    ctx = context(cache, session_id, epoch)
    assert ctx.incremental
    return ctx


def test_unchanged_partitions_are_left_out() -> None:
    cache = FetchSessionCache()
    session_id = opened(cache, 0, 1, 2).session_id
    ctx = incremental(cache, session_id, 1)
    assert ctx.select([result(0), result(1), result(2)]) == []


def test_records_or_news_bring_a_partition_in() -> None:
    cache = FetchSessionCache()
    session_id = opened(cache, 0, 1, 2, 3, 4).session_id
    ctx = incremental(cache, session_id, 1)
    sent = ctx.select([
        result(0, size=100),  # records
        result(1, hw=11),  # the high watermark moved
        result(2, lso=8),  # the last stable offset moved
        result(3, log_start=4),  # the log start offset moved
        result(4),
    ])  # fmt: skip
    assert indexes(sent) == [0, 1, 2, 3]
    # told once: the next response leaves them out
    again = incremental(cache, session_id, 2)
    assert again.select([result(0), result(1, hw=11), result(2, lso=8), result(3, log_start=4),
                         result(4)]) == []  # fmt: skip


def test_errors_always_go_out_and_the_high_watermark_after_them() -> None:
    cache = FetchSessionCache()
    session_id = opened(cache, 0).session_id
    error = ErrorCode.not_leader_or_follower
    assert indexes(incremental(cache, session_id, 1).select([result(0, -1, error=error)])) == [0]
    assert indexes(incremental(cache, session_id, 2).select([result(0, -1, error=error)])) == [0]
    assert indexes(incremental(cache, session_id, 3).select([result(0, 10)])) == [0]
    assert incremental(cache, session_id, 4).select([result(0, 10)]) == []


def test_preferred_read_replica_always_goes_out() -> None:
    cache = FetchSessionCache()
    session_id = opened(cache, 0).session_id
    redirect = FetchResult(TOPIC, 0, ErrorCode.none, 10, 0, preferred_read_replica=2)
    assert incremental(cache, session_id, 1).select([redirect]) == [redirect]


def test_partitions_that_got_records_are_read_last_next_time() -> None:
    cache = FetchSessionCache()
    session_id = opened(cache, 0, 1, 2).session_id
    incremental(cache, session_id, 1).select([result(0, size=10), result(1), result(2)])
    assert [w.partition for w in incremental(cache, session_id, 2).wanted] == [1, 2, 0]


def test_a_throttled_incremental_response_is_told_again() -> None:
    cache = FetchSessionCache()
    session_id = opened(cache, 0, 1).session_id
    ctx = incremental(cache, session_id, 1)
    sent = ctx.select([result(0, hw=12), result(1)])
    assert ctx.throttled(cache, sent) == session_id
    assert indexes(incremental(cache, session_id, 2).select([result(0, 12), result(1)])) == [0]


def test_a_throttled_full_fetch_opens_no_session() -> None:
    cache = FetchSessionCache()
    ctx = context(cache, 0, INITIAL_EPOCH, wanted(0))
    sent = ctx.select([result(0)])
    assert ctx.throttled(cache, sent) == 0 and len(cache) == 0


# ---- a full cache ---------------------------------------------------------------------------

EVICTION_MS = 1000


def small_cache() -> FetchSessionCache:
    return FetchSessionCache(slots=2, eviction_ms=EVICTION_MS, rng=random.Random(7))


def test_no_slots_no_sessions() -> None:
    cache = FetchSessionCache(slots=0)
    assert context(cache, 0, INITIAL_EPOCH, wanted(0)).session_id == 0


def test_a_full_cache_gives_a_stale_session_slot_to_anyone() -> None:
    cache = small_cache()
    stale = opened(cache, 0, 1, 2, privileged=True, now_ms=0).session_id
    kept = opened(cache, 0, 1, 2, privileged=True, now_ms=500).session_id
    new = context(cache, 0, INITIAL_EPOCH, wanted(0), now_ms=EVICTION_MS).session_id
    assert new != 0 and cache.get(stale) is None and cache.get(kept) is not None


def test_a_follower_takes_a_consumers_slot_and_never_the_reverse() -> None:
    cache = small_cache()
    follower = opened(cache, 0, privileged=True).session_id
    consumer = opened(cache, 0).session_id
    newcomer = context(cache, 0, INITIAL_EPOCH, wanted(0, 1, 2), now_ms=10).session_id
    assert newcomer != 0 and cache.get(consumer) is None  # a bigger consumer session: taken
    second = context(cache, 0, INITIAL_EPOCH, wanted(0), privileged=True, now_ms=20).session_id
    assert second != 0 and cache.get(newcomer) is None and cache.get(follower) is not None
    refused = context(cache, 0, INITIAL_EPOCH, wanted(*range(50)), now_ms=30)
    assert refused.session_id == 0 and len(cache) == 2  # only followers' sessions left


def test_a_consumer_takes_only_a_smaller_consumers_slot() -> None:
    cache = small_cache()
    opened(cache, 0, 1)
    opened(cache, 0, 1, 2)
    assert context(cache, 0, INITIAL_EPOCH, wanted(0, 1), now_ms=5).session_id == 0
    assert context(cache, 0, INITIAL_EPOCH, wanted(0, 1, 2), now_ms=5).session_id != 0
    assert cache.evictions == 1
