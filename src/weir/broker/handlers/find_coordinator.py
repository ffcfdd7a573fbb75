"""FindCoordinator (10): the broker coordinating a group (key type 0) or a transactional id
(key type 1): the leader of its partition of `__consumer_offsets` or `__transaction_state`,
which is created on first use as Kafka does; this broker on a single node."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.authz.checks import coordinator_error
from weir.broker.context import BrokerContext, make
from weir.broker.group.store import OFFSETS_TOPIC, GroupStore
from weir.broker.txn.store import TRANSACTION_STATE_TOPIC, TransactionStore
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module

GROUP, TRANSACTION = 0, 1


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.FIND_COORDINATOR, request.api_version)
    body = request.body
    key_type = getattr(body, "key_type", GROUP)
    if hasattr(body, "coordinator_keys"):  # v4+: several keys at once
        coordinators = []
        for key in body.coordinator_keys:
            node, host, port, error, message = _coordinator(broker, key, key_type)
            coordinators.append(
                make(m.Coordinator, key=key, node_id=node, host=host, port=port,
                     error_code=error, error_message=message)
            )  # fmt: skip
        return make(
            m.FindCoordinatorResponse,
            throttle_time=datetime.timedelta(0),
            coordinators=tuple(coordinators),
        )
    node, host, port, error, message = _coordinator(broker, body.key, key_type)
    return make(
        m.FindCoordinatorResponse,
        throttle_time=datetime.timedelta(0),
        error_code=error,
        error_message=message,
        node_id=node,
        host=host,
        port=port,
    )


def _coordinator(
    broker: BrokerContext, key: str, key_type: int
) -> tuple[int, str, int, ErrorCode, str | None]:
    """(node, host, port, error, message) of the coordinator for `key`: this broker on a
    single node; in a cluster, the leader of the key's internal partition."""
    if refused := coordinator_error(broker, key, key_type):
        return -1, "", -1, refused, None
    topic, index, error, message = _internal_partition(broker, key, key_type)
    if error is not ErrorCode.none:
        return -1, "", -1, error, message
    cluster = broker.cluster
    if cluster is None:
        host, port = broker.advertised
        return broker.config.node_id, host, port, ErrorCode.none, None
    partition = cluster.cache.topics.get(topic, {}).get(index)
    leader = cluster.cache.brokers.get(partition.leader) if partition is not None else None
    leader = broker.for_client(leader) if leader is not None else None
    if leader is None:
        return -1, "", -1, ErrorCode.coordinator_not_available, None
    return leader.node_id, leader.host, leader.port, ErrorCode.none, None


def _internal_partition(
    broker: BrokerContext, key: str, key_type: int
) -> tuple[str, int, ErrorCode, str | None]:
    """(topic, partition) holding `key`'s state, the topic created if need be; or an error.
    On a single node `__consumer_offsets` waits for the first commit or join."""
    store: GroupStore | TransactionStore
    if key_type == GROUP:
        store, topic = broker.groups.store, OFFSETS_TOPIC
    elif key_type != TRANSACTION:
        return "", -1, ErrorCode.invalid_request, f"unknown coordinator key type {key_type}"
    elif broker.transactions is None:
        return "", -1, ErrorCode.coordinator_not_available, "no transaction coordinator here"
    elif not key:
        return "", -1, ErrorCode.invalid_request, "an empty transactional id"
    else:
        store, topic = broker.transactions.store, TRANSACTION_STATE_TOPIC
    if broker.cluster is not None or key_type == TRANSACTION:
        try:
            store.ensure()
        except RuntimeError as exc:
            return "", -1, ErrorCode.coordinator_not_available, str(exc)
    return topic, store.partition_for(key), ErrorCode.none, None
