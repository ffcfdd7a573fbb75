"""ListTransactions (66): the transactional ids this broker coordinates, filtered by state and
producer id (v0), by how long they have been running (v1) and by a pattern on the id (v2).
State names it does not know come back as unknown_state_filters."""

from __future__ import annotations

import datetime
import re
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.authz.acl import AclOperation, ResourceType
from weir.broker.context import BrokerContext, make
from weir.broker.txn.state import TxnState
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.LIST_TRANSACTIONS, request.api_version)
    body = request.body
    names = tuple(body.state_filters)
    states = [s for s in (TxnState.from_name(n) for n in names) if s is not None]
    unknown = tuple(n for n in names if TxnState.from_name(n) is None)
    error, listed = ErrorCode.none, []
    pattern = getattr(body, "transactional_id_pattern", None)
    if broker.transactions is None:
        error = ErrorCode.coordinator_not_available
    elif pattern and not _valid_pattern(pattern):
        error = ErrorCode.invalid_regular_expression
    else:
        listed = broker.transactions.list_transactions(
            states, body.producer_id_filters,
            min_duration_ms=getattr(body, "duration_filter", -1),
            transactional_id_pattern=pattern or None,
        )  # fmt: skip
    return make(
        m.ListTransactionsResponse,
        throttle_time=datetime.timedelta(0),
        error_code=error,
        unknown_state_filters=unknown,
        transaction_states=tuple(
            make(m.TransactionState, transactional_id=t.transactional_id,
                 producer_id=t.producer_id, transaction_state=t.state.value)
            for t in listed
            if broker.authorized(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                                 t.transactional_id)
        ),
    )  # fmt: skip


def _valid_pattern(pattern: str) -> bool:
    try:
        re.compile(pattern)
    except re.error:
        return False
    return True
