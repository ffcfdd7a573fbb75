"""OffsetFetch (9): committed offsets of one group (v1-7) or several (v8). With
require_stable (v7+, KIP-447) a partition whose offset an open transaction has committed
answers UNSTABLE_OFFSET_COMMIT, which clients retry until the transaction ends."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.authz.acl import AclOperation, ResourceType
from weir.broker.authz.checks import authorized_names, group_error
from weir.broker.context import BrokerContext, make
from weir.broker.group.group import CommittedOffset
from weir.broker.handlers.per_partition import by_topic
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.OFFSET_FETCH, request.api_version)
    body = request.body

    def coordinates(group_id: str) -> bool:  # refused groups are answered as not coordinated
        return broker.groups.store.is_coordinator(group_id) and not refused(group_id)

    def refused(group_id: str) -> ErrorCode:
        return group_error(broker, AclOperation.DESCRIBE, group_id)

    stable = bool(getattr(body, "require_stable", False))
    if hasattr(body, "groups"):
        groups = tuple(
            make(m.OffsetFetchResponseGroup, group_id=g.group_id, error_code=ErrorCode.none,
                 topics=_topics(m, broker, g.group_id, g.topics, "OffsetFetchResponseTopics",
                                "OffsetFetchResponsePartitions", stable))
            if coordinates(g.group_id)
            else make(m.OffsetFetchResponseGroup, group_id=g.group_id,
                      error_code=refused(g.group_id) or ErrorCode.not_coordinator, topics=())
            for g in body.groups
        )  # fmt: skip
        return make(m.OffsetFetchResponse, throttle_time=datetime.timedelta(0), groups=groups)
    if not coordinates(body.group_id):  # a moved coordinator: the client looks it up again
        return make(m.OffsetFetchResponse, throttle_time=datetime.timedelta(0), topics=(),
                    error_code=refused(body.group_id) or ErrorCode.not_coordinator)  # fmt: skip
    topics = _topics(m, broker, body.group_id, body.topics, "OffsetFetchResponseTopic",
                     "OffsetFetchResponsePartition", stable)  # fmt: skip
    return make(
        m.OffsetFetchResponse,
        throttle_time=datetime.timedelta(0),
        topics=topics,
        error_code=ErrorCode.none,
    )


def _topics(
    m: Any,
    broker: BrokerContext,
    group_id: str,
    requested: Any,
    topic_type: str,
    partition_type: str,
    require_stable: bool = False,
) -> tuple[Any, ...]:
    wanted = None
    if requested is not None:
        wanted = [(t.name, p) for t in requested for p in t.partition_indexes]
    committed = broker.groups.fetch_offsets(group_id, wanted)
    names = (name for name, _ in committed)
    describable = authorized_names(broker, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
    answers: list[tuple[tuple[str, int], tuple[ErrorCode, CommittedOffset | None]]] = []
    for (name, index), offset in sorted(committed.items()):
        error = ErrorCode.none
        if name not in describable:
            if wanted is None:  # all topics: those it may not describe are left out
                continue
            error, offset = ErrorCode.topic_authorization_failed, None
        elif require_stable and broker.groups.has_pending(group_id, (name, index)):
            error, offset = ErrorCode.unstable_offset_commit, None
        answers.append(((name, index), (error, offset)))
    return by_topic(
        answers,
        lambda index, answer: _partition(getattr(m, partition_type), index, *answer),
        lambda name, entries: make(getattr(m, topic_type), name=name, partitions=entries),
    )


def _partition(
    partition_type: type, index: int, error: ErrorCode, offset: CommittedOffset | None
) -> Any:
    return make(
        partition_type, partition_index=index, error_code=error,
        committed_offset=offset.offset if offset else -1,
        committed_leader_epoch=offset.leader_epoch if offset else -1,
        metadata=offset.metadata if offset else "",
    )  # fmt: skip
