"""ListPartitionReassignments (46): the partition moves under way, with their full replica set
and the replicas being added and removed — what `kafka-reassign-partitions.sh --verify` and
`weir reassign verify` read. Answered by the controller (NOT_CONTROLLER elsewhere). Needs
DESCRIBE on the cluster. A single node never has one."""

from __future__ import annotations

import asyncio
import datetime
import itertools
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.authz.acl import AclOperation
from weir.broker.authz.checks import cluster_error
from weir.broker.context import BrokerContext, make
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module

TopicPartition = tuple[str, int]


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.LIST_PARTITION_REASSIGNMENTS, request.api_version)
    body = request.body
    wanted: list[TopicPartition] | None = None
    if body.topics is not None:
        wanted = [(t.name, p) for t in body.topics for p in t.partition_indexes]
    if refused := cluster_error(broker, AclOperation.DESCRIBE):
        return _response(m, refused, None, {})
    if broker.cluster is None:
        return _response(m, ErrorCode.none, None, {})
    future = broker.cluster.controller.list_partition_reassignments(wanted)
    try:
        async with asyncio.timeout(max(body.timeout.total_seconds(), 0.001)):
            ongoing = await asyncio.wrap_future(future)
    except TimeoutError:
        return _response(m, ErrorCode.request_timed_out, "the controller did not answer in time",
                         {})  # fmt: skip
    if ongoing is None:
        return _response(m, ErrorCode.not_controller, "this broker is not the controller", {})
    return _response(m, ErrorCode.none, None, ongoing)


def _response(m: Any, error: ErrorCode, message: str | None,
              ongoing: dict[TopicPartition, tuple[tuple[int, ...], ...]]) -> Any:  # fmt: skip
    topics = tuple(
        make(m.OngoingTopicReassignment, name=topic, partitions=tuple(
            make(m.OngoingPartitionReassignment, partition_index=index, replicas=replicas,
                 adding_replicas=adding, removing_replicas=removing)
            for (_, index), (replicas, adding, removing) in entries
        ))
        for topic, entries in itertools.groupby(sorted(ongoing.items()),
                                                key=lambda item: item[0][0])
    )  # fmt: skip
    return make(m.ListPartitionReassignmentsResponse, throttle_time=datetime.timedelta(0),
                error_code=error, error_message=message, topics=topics)  # fmt: skip
