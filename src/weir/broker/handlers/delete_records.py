"""DeleteRecords (21): move partitions' log start offsets forward."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.authz.checks import delete_records_error
from weir.broker.context import BrokerContext, make
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.DELETE_RECORDS, request.api_version)
    topics = []
    for topic in request.body.topics:
        partitions = []
        refused = delete_records_error(broker, topic.name)
        for p in topic.partitions:
            error, low = refused, -1
            if refused is ErrorCode.none:
                error, low = broker.replicas.delete_records(topic.name, p.partition_index, p.offset)
            partitions.append(
                make(
                    m.DeleteRecordsPartitionResult,
                    partition_index=p.partition_index,
                    low_watermark=low,
                    error_code=error,
                )
            )
        topics.append(
            make(m.DeleteRecordsTopicResult, name=topic.name, partitions=tuple(partitions))
        )
    return make(m.DeleteRecordsResponse, throttle_time=datetime.timedelta(0), topics=tuple(topics))
