"""ListOffsets (2): earliest (-2), latest (-1), max timestamp (-3), or by timestamp. Latest is
the high watermark, or the last stable offset for read_committed (isolation level 1)."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.authz.acl import AclOperation
from weir.broker.authz.checks import topic_error
from weir.broker.context import BrokerContext, make
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module

READ_COMMITTED = 1


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.LIST_OFFSETS, request.api_version)
    topics = []
    read_committed = getattr(request.body, "isolation_level", 0) == READ_COMMITTED
    #: Kafka's test for a client's request: it has an isolation level (v2+) and no replica id
    client = request.api_version >= 2 and getattr(request.body, "replica_id", -1) < 0
    for topic in request.body.topics:
        partitions = []
        refused = topic_error(broker, AclOperation.DESCRIBE, topic.name)
        for p in topic.partitions:
            error, offset, timestamp = refused, -1, -1
            if refused is ErrorCode.none:
                error, offset, timestamp = broker.replicas.list_offset(
                    topic.name, p.partition_index, p.timestamp, read_committed=read_committed,
                    client=client,
                )  # fmt: skip
            partition = broker.replicas.get(topic.name, p.partition_index)
            epoch = partition.leader_epoch if partition is not None else -1
            partitions.append(
                make(
                    m.ListOffsetsPartitionResponse,
                    partition_index=p.partition_index,
                    error_code=error,
                    timestamp=timestamp,
                    offset=offset,
                    leader_epoch=epoch,
                )
            )
        topics.append(
            make(m.ListOffsetsTopicResponse, name=topic.name, partitions=tuple(partitions))
        )
    return make(m.ListOffsetsResponse, throttle_time=datetime.timedelta(0), topics=tuple(topics))
