"""AddOffsetsToTxn (25): a transactional producer is about to commit a consumer group's offsets
in its transaction (TxnOffsetCommit): the group's `__consumer_offsets` partition joins the
transaction, so its markers make those offsets visible or discard them."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.context import BrokerContext, fenced_error, make
from weir.broker.group.store import OFFSETS_TOPIC
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module

#: the first version whose clients understand PRODUCER_FENCED (KIP-588)
FENCED_SINCE = 2


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.ADD_OFFSETS_TO_TXN, request.api_version)
    return make(
        m.AddOffsetsToTxnResponse,
        throttle_time=datetime.timedelta(0),
        error_code=await _add(broker, request),
    )


async def _add(broker: BrokerContext, request: Request) -> ErrorCode:
    body = request.body
    if broker.transactions is None:
        return ErrorCode.coordinator_not_available
    if not body.group_id:
        return ErrorCode.invalid_group_id
    store = broker.groups.store
    try:
        store.ensure()
    except RuntimeError:
        return ErrorCode.coordinator_not_available
    partition = (OFFSETS_TOPIC, store.partition_for(body.group_id))
    error = await broker.transactions.add_partitions(
        body.transactional_id, body.producer_id, body.producer_epoch, [partition]
    )
    if error is ErrorCode.producer_fenced:
        return fenced_error(request.api_version, FENCED_SINCE)
    return error
