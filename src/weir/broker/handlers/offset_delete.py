"""OffsetDelete (47): delete a group's offsets for topics its members do not subscribe to."""

from __future__ import annotations

import datetime
from typing import Any

from weir.broker.authz.checks import unreadable_partitions
from weir.broker.context import BrokerContext, make
from weir.broker.handlers.per_partition import partition_errors
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.OFFSET_DELETE, request.api_version)
    body = request.body
    wanted = [(t.name, p.partition_index) for t in body.topics for p in t.partitions]
    refused = unreadable_partitions(broker, wanted)
    error, results = broker.groups.delete_offsets(
        body.group_id, [w for w in wanted if w not in refused]
    )
    results = {**results, **refused}
    topics = partition_errors(results, m.OffsetDeleteResponsePartition,
                              m.OffsetDeleteResponseTopic)  # fmt: skip
    return make(m.OffsetDeleteResponse, error_code=error, throttle_time=datetime.timedelta(0),
                topics=topics)  # fmt: skip
