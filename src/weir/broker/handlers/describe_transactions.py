"""DescribeTransactions (65): the coordinator's state of each transactional id asked about
(TRANSACTIONAL_ID_NOT_FOUND for ids it does not know, NOT_COORDINATOR for ids it does not
coordinate)."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.authz.acl import AclOperation
from weir.broker.authz.checks import transactional_id_error
from weir.broker.context import BrokerContext, make
from weir.broker.txn.coordinator import TransactionDescription
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.DESCRIBE_TRANSACTIONS, request.api_version)
    states = []
    for transactional_id in request.body.transactional_ids:
        refused = transactional_id_error(broker, AclOperation.DESCRIBE, transactional_id)
        if refused or broker.transactions is None:
            description = TransactionDescription(refused or ErrorCode.coordinator_not_available,
                                                 transactional_id)  # fmt: skip
        else:
            description = broker.transactions.describe(transactional_id)
        states.append(_state(m, description))
    return make(
        m.DescribeTransactionsResponse,
        throttle_time=datetime.timedelta(0),
        transaction_states=tuple(states),
    )


def _state(m: Any, d: TransactionDescription) -> Any:
    topics: dict[str, list[int]] = {}
    for topic, index in d.partitions:
        topics.setdefault(topic, []).append(index)
    return make(
        m.TransactionState,
        error_code=d.error,
        transactional_id=d.transactional_id,
        transaction_state=d.state.value if d.state is not None else "",
        transaction_timeout=datetime.timedelta(milliseconds=d.timeout_ms),
        transaction_start_time=datetime.datetime.fromtimestamp(d.start_ms / 1000, datetime.UTC),
        producer_id=d.producer_id,
        producer_epoch=d.producer_epoch,
        topics=tuple(make(m.TopicData, topic=t, partitions=tuple(p)) for t, p in topics.items()),
    )
