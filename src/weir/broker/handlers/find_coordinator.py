"""FindCoordinator (10): this broker coordinates every group (and would every transaction)."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.context import BrokerContext, make
from weir.broker.group.store import OFFSETS_TOPIC
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
    single node; in a cluster, the leader of the group's `__consumer_offsets` partition."""
    if key_type != GROUP:
        return -1, "", -1, ErrorCode.coordinator_not_available, "transactions are not supported"
    cluster = broker.cluster
    if cluster is None:
        host, port = broker.config.advertised
        return broker.config.node_id, host, port, ErrorCode.none, None
    store = broker.groups.store
    try:
        store.ensure()
    except RuntimeError as exc:
        return -1, "", -1, ErrorCode.coordinator_not_available, str(exc)
    partition = cluster.cache.topics.get(OFFSETS_TOPIC, {}).get(store.partition_for(key))
    leader = cluster.cache.brokers.get(partition.leader) if partition is not None else None
    if leader is None:
        return -1, "", -1, ErrorCode.coordinator_not_available, None
    return leader.node_id, leader.host, leader.port, ErrorCode.none, None
