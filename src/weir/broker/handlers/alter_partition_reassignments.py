"""AlterPartitionReassignments (45): move partitions to other replicas, replace a move under way,
or cancel one (no replica list) — what kafka-reassign-partitions.sh and `weir reassign` send.
The controller carries the moves out (`weir.cluster.controller.reassignment`); another broker
answers NOT_CONTROLLER and the client asks the controller. Needs ALTER on the cluster.

A single node holds every partition's only replica: a target of that node alone is already
met, any other broker is unknown, and nothing is ever being moved."""

from __future__ import annotations

import asyncio
import datetime
import itertools
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.authz.acl import AclOperation
from weir.broker.authz.checks import cluster_error
from weir.broker.context import BrokerContext, make
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module

TopicPartition = tuple[str, int]
Outcome = tuple[ErrorCode, str | None]


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.ALTER_PARTITION_REASSIGNMENTS, request.api_version)
    body = request.body
    targets: dict[TopicPartition, tuple[int, ...] | None] = {
        (t.name, p.partition_index): None if p.replicas is None else tuple(p.replicas)
        for t in body.topics for p in t.partitions
    }  # fmt: skip
    if refused := cluster_error(broker, AclOperation.ALTER):
        return _response(m, refused, None, dict.fromkeys(targets, (refused, None)))
    if broker.cluster is None:
        return _response(m, ErrorCode.none, None, _single_node(broker, targets))
    future = broker.cluster.controller.alter_partition_reassignments(targets)
    try:
        async with asyncio.timeout(max(body.timeout.total_seconds(), 0.001)):
            outcome = await asyncio.wrap_future(future)
    except TimeoutError:
        timed_out = (ErrorCode.request_timed_out, "the controller did not answer in time")
        return _response(m, ErrorCode.none, None, dict.fromkeys(targets, timed_out))
    if outcome is None:
        return _response(m, ErrorCode.not_controller, "this broker is not the controller", {})
    return _response(m, ErrorCode.none, None,
                     {tp: (ErrorCode(code), message) for tp, (code, message) in outcome.items()})


def _single_node(broker: BrokerContext, targets: dict[TopicPartition, tuple[int, ...] | None]
                 ) -> dict[TopicPartition, Outcome]:  # fmt: skip
    node_id = broker.config.node_id
    outcomes: dict[TopicPartition, Outcome] = {}
    for tp, target in targets.items():
        if broker.replicas.get(*tp) is None:
            outcomes[tp] = ErrorCode.unknown_topic_or_partition, f"no partition {tp[0]}-{tp[1]}"
        elif target is None:
            outcomes[tp] = (ErrorCode.no_reassignment_in_progress,
                            f"no reassignment of {tp[0]}-{tp[1]} is in progress")  # fmt: skip
        elif target != (node_id,):
            outcomes[tp] = (ErrorCode.invalid_replica_assignment,
                            f"a single node has one broker, {node_id}: {list(target)} cannot "
                            "hold a replica here")  # fmt: skip
        else:
            outcomes[tp] = ErrorCode.none, None
    return outcomes


def _response(m: Any, error: ErrorCode, message: str | None,
              outcomes: dict[TopicPartition, Outcome]) -> Any:  # fmt: skip
    ordered = sorted(outcomes.items())
    topics = tuple(
        make(m.ReassignableTopicResponse, name=topic, partitions=tuple(
            make(m.ReassignablePartitionResponse, partition_index=index, error_code=code,
                 error_message=text)
            for (_, index), (code, text) in entries
        ))
        for topic, entries in itertools.groupby(ordered, key=lambda item: item[0][0])
    )  # fmt: skip
    return make(m.AlterPartitionReassignmentsResponse, throttle_time=datetime.timedelta(0),
                error_code=error, error_message=message, responses=topics)  # fmt: skip
