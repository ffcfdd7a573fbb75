"""Fetch (1): long-poll reads; record bytes go out by sendfile straight from segment files,
through descriptors of their own that the connection closes once they are sent.

Fetch sessions (KIP-227, `fetch_sessions`): a consumer or follower that asks for one (session
epoch 0) gets a session id, then sends only the partitions whose fetch state changed; every
partition of the session is read (and waited on, for long polls), and the response carries only
those with records or news (high watermark, last stable offset, log start offset, an error).
read_committed fetches (isolation level 1) stop at the last stable offset and list
the aborted transactions of the range, whose records the client skips (KIP-98); the broker does
not filter records.

Reads from followers (KIP-392): a consumer's Fetch v11+ may read a partition from any replica,
up to that replica's high watermark. With `replica.selector.class` rack-aware, a leader answers
a consumer that names its rack (`client.rack`) with the in-sync replica of that rack to read
from (preferred_read_replica, no records), and the client fetches there from then on.

A consumer's `consumer_byte_rate` quota (`client_quotas`), as Kafka applies it: a fetch reads at
most what the quota allows in its window; the response's bytes count against it, and a consumer
over it gets an empty response with its throttle time (the bytes taken back), then its
connection is muted for that long.

A consumer's fetch of a partition whose cold reads are held for its disk's health
(`weir.broker.disk_health`) gets no records for that partition and the response the hold as its
throttle time; the other partitions are read as usual.

A consumer's fetch is counted for the audit (`weir.broker.audit`) by what its response carries,
per partition; followers' fetches are not.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import replace
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import Records

from weir.broker.authz.checks import split_fetch
from weir.broker.client_quotas import ClientQuotaManager, client_identity, throttle_connection
from weir.broker.context import BrokerContext, make
from weir.broker.disk_health import DiskHealth
from weir.broker.fetch_sessions import (
    FINAL_EPOCH,
    INVALID_SESSION_ID,
    FetchContext,
    new_context,
)
from weir.broker.handlers.per_partition import by_topic
from weir.broker.results import FetchRequestPartition, FetchResult, release
from weir.broker.wire import ChunkedResponse
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module
from weir.storage import FileSlice

MARKER_BYTES = 16
READ_COMMITTED = 1
FOLLOWER_FETCH_VERSION = 11  # the first Fetch with rack_id and preferred_read_replica
CLIENT_THROTTLE_VERSION = 8  # KIP-219: clients from this version wait out a throttle themselves


async def handle(broker: BrokerContext, request: Request) -> Any:
    body = request.body
    replica_id = getattr(body, "replica_id", -1)
    context = _session_context(broker, body, replica_id)
    if context.error is not ErrorCode.none:
        return _session_error(request, context.error)
    wanted, refused = split_fetch(broker, context.wanted, replica_id)
    from_followers = replica_id < 0 and request.api_version >= FOLLOWER_FETCH_VERSION
    redirected = []
    client_rack = getattr(body, "rack_id", "")
    if from_followers and client_rack and broker.config.rack_aware_reads and broker.cluster:
        racks = {n: b.rack for n, b in broker.cluster.live_brokers().items()}
        kept = []
        for w in wanted:
            result = broker.replicas.preferred_read_replica(
                w.topic, w.partition, w.offset, client_rack, racks
            )
            if result is None:
                kept.append(w)
            else:
                redirected.append(result)
        wanted = kept
    held: list[FetchResult] = []
    hold_ms = 0
    if broker.disk_health is not None and replica_id < 0:
        wanted, held, hold_ms = _disk_holds(broker, broker.disk_health, wanted)
    max_wait_ms = int(body.max_wait.total_seconds() * 1000)
    quota = _consumer_quota(broker, request, replica_id)
    max_bytes = body.max_bytes
    if quota is not None:
        allowed = quota.max_value_in_window(*client_identity(request.client_id))
        max_bytes = min(max_bytes, int(allowed)) if allowed is not None else max_bytes
    results = await broker.replicas.fetch(
        wanted,
        max_wait_ms=max(0, max_wait_ms) if not redirected else 0,
        min_bytes=body.min_bytes,
        max_bytes=max_bytes,
        replica_id=replica_id,
        from_followers=from_followers,
        read_committed=getattr(body, "isolation_level", 0) == READ_COMMITTED,
    )
    if broker.disk_health is not None and replica_id < 0:
        _note_reads(broker, broker.disk_health, wanted, results)
    sent, response = _answer(request, context, results, redirected + refused + held, hold_ms)
    if quota is not None:
        answer = _throttled(broker, request, quota, response, context, sent)
        if answer is not response:
            return answer  # nothing sent
    if broker.audit is not None and replica_id < 0:
        broker.audit.fetched(request.client_id, sent)
    return response


def _session_context(broker: BrokerContext, body: Any, replica_id: int) -> FetchContext:
    """The request's partitions and session fields, as its fetch session sees them."""
    requested = [
        FetchRequestPartition(topic.topic, p.partition, p.fetch_offset, p.partition_max_bytes,
                              getattr(p, "current_leader_epoch", -1))
        for topic in body.topics for p in topic.partitions
    ]  # fmt: skip
    forgotten = [(topic.topic, index) for topic in getattr(body, "forgotten_topics_data", ())
                 for index in topic.partitions]  # fmt: skip
    return new_context(
        broker.fetch_sessions, session_id=getattr(body, "session_id", INVALID_SESSION_ID),
        epoch=getattr(body, "session_epoch", FINAL_EPOCH), requested=requested,
        forgotten=forgotten, privileged=replica_id >= 0, now_ms=broker.clock.monotonic_ms(),
    )  # fmt: skip


def _session_error(request: Request, error: ErrorCode) -> ChunkedResponse:
    m = response_module(ApiKey.FETCH, request.api_version)
    response = make(m.FetchResponse, throttle_time=datetime.timedelta(0), error_code=error,
                    session_id=INVALID_SESSION_ID, responses=())  # fmt: skip
    return ChunkedResponse.with_slices(request, response, {})


def _answer(
    request: Request, context: FetchContext, results: list[FetchResult],
    others: list[FetchResult], throttle_ms: int = 0,
) -> tuple[list[FetchResult], ChunkedResponse]:  # fmt: skip
    """The results the response carries (`context.select`), and the response. The file slices
    of the results left out (empty ones) are closed here; those carried, by the response."""
    try:
        sent = context.select(results + others)
    except BaseException:
        release(results)
        raise
    carried = {id(result) for result in sent}
    release([r for r in results if id(r) not in carried])
    try:
        return sent, _response(request, sent, context.session_id, throttle_ms)
    except BaseException:
        release(sent)
        raise


def _consumer_quota(
    broker: BrokerContext, request: Request, replica_id: int
) -> ClientQuotaManager | None:
    """The fetch quota manager if a consumer's fetch is subject to one (followers' are not)."""
    quotas = broker.quotas
    if quotas is None or not quotas.fetch.enabled or replica_id >= 0:
        return None
    return quotas.fetch


def _throttled(
    broker: BrokerContext,
    request: Request,
    quota: ClientQuotaManager,
    response: ChunkedResponse,
    context: FetchContext,
    sent: list[FetchResult],
) -> ChunkedResponse:
    """`response`, or for a consumer over its quota an empty one with the throttle time."""
    user, client_id = client_identity(request.client_id)
    throttle_ms = quota.record(user, client_id, response.size)
    if not throttle_ms:
        return response
    quota.unrecord(user, client_id, response.size)
    response.close()
    throttle_connection(
        throttle_ms, client_throttles=request.api_version >= CLIENT_THROTTLE_VERSION
    )
    m = response_module(ApiKey.FETCH, request.api_version)
    session_id = context.throttled(broker.fetch_sessions, sent)
    empty = make(m.FetchResponse, throttle_time=datetime.timedelta(milliseconds=throttle_ms),
                 error_code=ErrorCode.none, session_id=session_id, responses=())  # fmt: skip
    return ChunkedResponse.with_slices(request, empty, {})


def _response(
    request: Request, results: list[FetchResult], session_id: int, throttle_ms: int = 0
) -> ChunkedResponse:
    m = response_module(ApiKey.FETCH, request.api_version)
    slices: dict[bytes, FileSlice] = {}
    topics = by_topic(
        (((r.topic, r.partition), r) for r in results),
        lambda _index, result: _partition(m, result, slices),
        lambda name, entries: make(m.FetchableTopicResponse, topic=name, partitions=entries),
    )
    response = make(m.FetchResponse, throttle_time=datetime.timedelta(milliseconds=throttle_ms),
                    error_code=ErrorCode.none, session_id=session_id,
                    responses=topics)  # fmt: skip
    return ChunkedResponse.with_slices(request, response, slices)


def _disk_holds(
    broker: BrokerContext, health: DiskHealth, wanted: list[FetchRequestPartition]
) -> tuple[list[FetchRequestPartition], list[FetchResult], int]:
    """`wanted` without the partitions whose cold reads are held for their disk's health (and
    those throttled but not held reading at most what their rate saved up); the held ones'
    empty results (watermarks only); the longest hold in ms (the response's throttle time)."""
    kept, held, longest = [], [], 0
    for w in wanted:
        partition = broker.replicas.partitions.get((w.topic, w.partition))
        hold, cap = 0, None
        if partition is not None and partition.serving:
            hold, cap = health.admit((w.topic, w.partition), w.offset,
                                     partition.log.log_end_offset)  # fmt: skip
        if not hold:
            kept.append(w if cap is None else replace(w, max_bytes=min(w.max_bytes, cap)))
            continue
        assert partition is not None
        longest = max(longest, hold)
        held.append(FetchResult(w.topic, w.partition, ErrorCode.none,
                                partition.log.high_watermark, partition.log.log_start_offset,
                                last_stable_offset=partition.last_stable_offset))  # fmt: skip
    return kept, held, longest


def _note_reads(
    broker: BrokerContext, health: DiskHealth, wanted: list[FetchRequestPartition],
    results: list[FetchResult],
) -> None:  # fmt: skip
    """Count what each partition read, for its disk's health."""
    offsets = {(w.topic, w.partition): w.offset for w in wanted}
    for result in results:
        if result.data is None:
            continue
        tp = (result.topic, result.partition)
        partition = broker.replicas.partitions.get(tp)
        if partition is not None and tp in offsets:
            health.note_read(tp, offsets[tp], partition.log.log_end_offset, result.data.size)


def _partition(m: Any, result: FetchResult, slices: dict[bytes, FileSlice]) -> Any:
    """One partition's data; its file slice stands in the response as a random marker that
    the wire replaces with the slice (noted in `slices`)."""
    records = Records(b"")
    if result.data is not None:
        marker = os.urandom(MARKER_BYTES)
        slices[marker] = result.data
        records = Records(marker)
    return make(
        m.PartitionData, partition_index=result.partition, error_code=result.error,
        high_watermark=result.high_watermark, last_stable_offset=_stable(result),
        log_start_offset=result.log_start_offset, aborted_transactions=_aborted(m, result),
        preferred_read_replica=result.preferred_read_replica, records=records,
    )  # fmt: skip


def _stable(result: FetchResult) -> int:
    return result.last_stable_offset if result.last_stable_offset >= 0 else result.high_watermark


def _aborted(m: Any, result: FetchResult) -> Any:
    if result.aborted is None:
        return None
    return tuple(make(m.AbortedTransaction, producer_id=producer_id, first_offset=first)
                 for producer_id, first in result.aborted)  # fmt: skip
