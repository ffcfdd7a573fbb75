"""StopReplica (5): stop serving partitions here, and delete their logs when asked (topic
deletion). The replica manager applies it (`ReplicaManager.stop_replicas`), the coordinators
of the internal topics told."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.context import BrokerContext, make
from weir.broker.handlers.per_partition import flat_partition_errors
from weir.protocol.apis import InterBrokerApiKey
from weir.protocol.codec import Request, response_module


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(InterBrokerApiKey.STOP_REPLICA, request.api_version)
    body = request.body
    error = broker.controller_request_error(body)
    if error is not ErrorCode.none:
        return make(m.StopReplicaResponse, error_code=error, partition_errors=())
    errors = broker.replicas.stop_replicas(_partitions(body))
    results = flat_partition_errors(errors, m.StopReplicaPartitionError)
    return make(m.StopReplicaResponse, error_code=ErrorCode.none, partition_errors=results)


def _partitions(body: Any) -> list[tuple[str, int, bool]]:
    """(topic, partition, delete) of any version: v3 carries delete per partition."""
    if hasattr(body, "topic_states"):
        return [
            (t.topic_name, p.partition_index, p.delete_partition)
            for t in body.topic_states
            for p in t.partition_states
        ]
    delete = bool(getattr(body, "delete_partitions", False))
    if hasattr(body, "topics"):
        return [(t.name, i, delete) for t in body.topics for i in t.partition_indexes]
    return [(p.topic_name, p.partition_index, delete) for p in body.ungrouped_partitions]
