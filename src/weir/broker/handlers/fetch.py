"""Fetch (1): long-poll reads; record bytes go out by sendfile straight from segment files,
through descriptors of their own that the connection closes once they are sent.

No fetch sessions: every response has session id 0, so clients send full requests (KIP-227
allows this). read_committed and read_uncommitted see the same data: there are no transactions.
"""

from __future__ import annotations

import datetime
import os
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import Records

from weir.broker.context import BrokerContext, make
from weir.broker.replica_manager import FetchRequestPartition, FetchResult, release
from weir.broker.wire import ChunkedResponse
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module

MARKER_BYTES = 16


async def handle(broker: BrokerContext, request: Request) -> Any:
    body = request.body
    wanted = [
        FetchRequestPartition(topic.topic, p.partition, p.fetch_offset, p.partition_max_bytes,
                              getattr(p, "current_leader_epoch", -1))
        for topic in body.topics for p in topic.partitions
    ]  # fmt: skip
    max_wait_ms = int(body.max_wait.total_seconds() * 1000)
    results = await broker.replicas.fetch(
        wanted,
        max_wait_ms=max(0, max_wait_ms),
        min_bytes=body.min_bytes,
        max_bytes=body.max_bytes,
        replica_id=getattr(body, "replica_id", -1),
    )
    try:
        return _response(request, results)
    except BaseException:
        release(results)
        raise


def _response(request: Request, results: list[FetchResult]) -> ChunkedResponse:
    m = response_module(ApiKey.FETCH, request.api_version)
    slices = {}
    topics: dict[str, list[Any]] = {}
    for result in results:
        records = Records(b"")
        if result.data is not None:
            marker = os.urandom(MARKER_BYTES)
            slices[marker] = result.data
            records = Records(marker)
        partition = make(
            m.PartitionData, partition_index=result.partition, error_code=result.error,
            high_watermark=result.high_watermark, last_stable_offset=result.high_watermark,
            log_start_offset=result.log_start_offset, aborted_transactions=None,
            preferred_read_replica=-1, records=records,
        )  # fmt: skip
        topics.setdefault(result.topic, []).append(partition)
    response = make(m.FetchResponse, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none,
                    session_id=0, responses=tuple(
                        make(m.FetchableTopicResponse, topic=t, partitions=tuple(ps))
                        for t, ps in topics.items()))  # fmt: skip
    return ChunkedResponse.with_slices(request, response, slices)
