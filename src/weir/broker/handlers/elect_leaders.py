"""ElectLeaders (43): preferred or unclean leader elections asked for by an admin client
(kafka-leader-election.sh, `weir cluster elect-leaders`). In a cluster the controller runs them,
as in Kafka's ZooKeeper mode: another broker answers NOT_CONTROLLER and the client asks the
controller. A single node leads all its partitions, so no election is ever needed there."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.authz.acl import AclOperation
from weir.broker.authz.checks import cluster_error
from weir.broker.context import BrokerContext, make
from weir.broker.handlers.per_partition import partition_errors
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module

TopicPartition = tuple[str, int]


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.ELECT_LEADERS, request.api_version)
    body = request.body
    wanted: list[TopicPartition] | None = None
    if body.topic_partitions is not None:
        wanted = [(t.topic, p) for t in body.topic_partitions for p in t.partitions]
    election_type = getattr(body, "election_type", 0)
    if refused := cluster_error(broker, AclOperation.ALTER):
        return _refusal(m, refused, wanted or [])
    if broker.cluster is None:
        results = _single_node(broker, wanted)
    else:
        future = broker.cluster.controller.elect_leaders(election_type, wanted)
        timeout = max(body.timeout.total_seconds(), 0.001)
        try:
            async with asyncio.timeout(timeout):
                outcome = await asyncio.wrap_future(future)
        except TimeoutError:
            outcome = {tp: int(ErrorCode.request_timed_out) for tp in wanted or ()}
        if outcome is None:
            return _refusal(m, ErrorCode.not_controller, wanted or [])
        results = {tp: ErrorCode(code) for tp, code in outcome.items()}
    return _response(m, ErrorCode.none, results)


def _single_node(
    broker: BrokerContext, wanted: list[TopicPartition] | None
) -> dict[TopicPartition, ErrorCode]:
    if wanted is None:
        wanted = sorted(broker.replicas.partitions)
    return {
        tp: ErrorCode.election_not_needed
        if broker.replicas.get(*tp) is not None
        else ErrorCode.unknown_topic_or_partition
        for tp in wanted
    }


def _refusal(m: Any, error: ErrorCode, wanted: list[TopicPartition]) -> Any:
    """NOT_CONTROLLER: in the top-level error code (v1+) and, for v0, on every partition."""
    return _response(m, error, dict.fromkeys(wanted, error))


def _response(m: Any, error: ErrorCode, results: dict[TopicPartition, ErrorCode]) -> Any:
    topics = partition_errors(dict(sorted(results.items())), m.PartitionResult,
                              m.ReplicaElectionResult, index="partition_id", name="topic",
                              partitions="partition_result", error_message=None)  # fmt: skip
    return make(m.ElectLeadersResponse, throttle_time=datetime.timedelta(0), error_code=error,
                replica_election_results=topics)  # fmt: skip
