"""EndTxn (26): a transactional producer commits or aborts its transaction. Answered once the
decision is persisted in `__transaction_state`; the markers follow."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.context import BrokerContext, fenced_error, make
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module

#: the first version whose clients understand PRODUCER_FENCED (KIP-588)
FENCED_SINCE = 2


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.END_TXN, request.api_version)
    body = request.body
    if broker.transactions is None:
        error = ErrorCode.coordinator_not_available
    else:
        error = await broker.transactions.end_transaction(
            body.transactional_id, body.producer_id, body.producer_epoch, body.committed
        )
    if error is ErrorCode.producer_fenced:
        error = fenced_error(request.api_version, FENCED_SINCE)
    return make(m.EndTxnResponse, throttle_time=datetime.timedelta(0), error_code=error)
