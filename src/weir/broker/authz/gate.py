"""What each API needs the authorizer to allow, where one refusal answers the whole request.

`REQUEST_CHECKS` is the table: an API key -> the checks its requests pass before the handler
runs (JoinGroup needs Read on its group, EndTxn Write on its transactional id, the
inter-broker APIs ClusterAction on the cluster, ...). A refused request is answered by
`refusal` with the response every Kafka client reads for it: the response of the request's
version with the resource type's error code (GROUP_AUTHORIZATION_FAILED, ...) at its top level
and every other field empty, as Kafka's `getErrorResponse` builds it.

APIs that name several resources (Produce, Fetch, Metadata, OffsetCommit, CreateTopics, ...)
answer per resource; their handlers ask `BrokerContext.authorized` for each and say so in one
line each.
"""

from __future__ import annotations

import dataclasses
import datetime
import types
import typing
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from weir.broker.authz.acl import CLUSTER_NAME, AclOperation, ResourceType
from weir.broker.authz.authorizer import Authorizer
from weir.protocol.apis import ApiKey, InterBrokerApiKey
from weir.protocol.codec import Request, response_module

#: the error code of a refusal, by the type of the resource refused
AUTHORIZATION_ERRORS = {
    ResourceType.TOPIC: ErrorCode.topic_authorization_failed,
    ResourceType.GROUP: ErrorCode.group_authorization_failed,
    ResourceType.CLUSTER: ErrorCode.cluster_authorization_failed,
    ResourceType.TRANSACTIONAL_ID: ErrorCode.transactional_id_authorization_failed,
}


NOT_AUTHORIZED = "Authorization failed."


@dataclass(frozen=True, slots=True)
class Check:
    """`allowed(authorizer, request body)`; `error` answers a refusal. Requests of versions
    below `since_version` skip it."""

    allowed: Callable[[Authorizer, Any], bool]
    error: ErrorCode
    since_version: int = 0


def on(operation: AclOperation, resource_type: ResourceType, field: str | None = None) -> Check:
    """`operation` on the resource the body's `field` names (the cluster: no field). A body
    whose field is None (InitProducerId without a transactional id) passes this check."""

    def allowed(authorizer: Authorizer, body: Any) -> bool:
        name = CLUSTER_NAME if field is None else getattr(body, field)
        return name is None or authorizer.allows(operation, resource_type, name)

    return Check(allowed, AUTHORIZATION_ERRORS[resource_type])


def _idempotent_producer(authorizer: Authorizer, body: Any) -> bool:
    """An idempotent producer (no transactional id) needs IdempotentWrite on the cluster or
    Write on some topic."""
    if body.transactional_id is not None:
        return True
    return authorizer.allows(
        AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME
    ) or authorizer.allows_any(AclOperation.WRITE, ResourceType.TOPIC)


CLUSTER_ACTION = on(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER)
READ_GROUP = on(AclOperation.READ, ResourceType.GROUP, "group_id")
WRITE_TRANSACTIONAL_ID = on(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, "transactional_id")

REQUEST_CHECKS: dict[int, tuple[Check, ...]] = {
    ApiKey.JOIN_GROUP: (READ_GROUP,),
    ApiKey.SYNC_GROUP: (READ_GROUP,),
    ApiKey.HEARTBEAT: (READ_GROUP,),
    ApiKey.LEAVE_GROUP: (READ_GROUP,),
    ApiKey.OFFSET_DELETE: (on(AclOperation.DELETE, ResourceType.GROUP, "group_id"),),
    ApiKey.INIT_PRODUCER_ID: (
        WRITE_TRANSACTIONAL_ID,
        Check(_idempotent_producer, ErrorCode.cluster_authorization_failed),
    ),
    ApiKey.ADD_OFFSETS_TO_TXN: (WRITE_TRANSACTIONAL_ID, READ_GROUP),
    ApiKey.END_TXN: (WRITE_TRANSACTIONAL_ID,),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (on(AclOperation.DESCRIBE, ResourceType.CLUSTER),),
    ApiKey.DESCRIBE_ACLS: (on(AclOperation.DESCRIBE, ResourceType.CLUSTER),),
    ApiKey.ALTER_PARTITION: (CLUSTER_ACTION,),
    InterBrokerApiKey.LEADER_AND_ISR: (CLUSTER_ACTION,),
    InterBrokerApiKey.STOP_REPLICA: (CLUSTER_ACTION,),
    InterBrokerApiKey.UPDATE_METADATA: (CLUSTER_ACTION,),
    InterBrokerApiKey.CONTROLLED_SHUTDOWN: (CLUSTER_ACTION,),
    # v4 is the brokers' batched form (a partition leader verifying a transaction, KIP-890);
    # clients' v0-v3 are checked per transactional id and topic by the handler
    ApiKey.ADD_PARTITIONS_TO_TXN: (dataclasses.replace(CLUSTER_ACTION, since_version=4),),
}


def refusal(authorizer: Authorizer, request: Request) -> Any | None:
    """The error response to a request the authorizer refuses as a whole; None if it may
    go on to its handler."""
    for check in REQUEST_CHECKS.get(request.api_key, ()):
        if request.api_version < check.since_version:
            continue
        if not check.allowed(authorizer, request.body):
            return error_response(request, check.error)
    return None


def error_response(request: Request, error: ErrorCode) -> Any:
    """The request's response with `error` at its top level and empty fields elsewhere."""
    module = response_module(request.api_key, request.api_version)
    kind = next(
        value
        for value in vars(module).values()
        if isinstance(value, type) and getattr(value, "__type__", None) is EntityType.response
    )
    hints = typing.get_type_hints(kind)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(kind):
        if f.name == "error_code":
            values[f.name] = error
        elif f.name == "error_message":
            values[f.name] = NOT_AUTHORIZED
        elif f.default is dataclasses.MISSING:
            values[f.name] = _empty(hints[f.name])
    return kind(**values)


def _empty(kind: Any) -> Any:
    if typing.get_origin(kind) in (typing.Union, types.UnionType) and type(None) in (
        typing.get_args(kind)
    ):
        return None
    if typing.get_origin(kind) is tuple:
        return ()
    for base, empty in _EMPTY_BY_BASE:
        if isinstance(kind, type) and issubclass(kind, base):
            return empty
    raise TypeError(f"no empty value for {kind!r}")


_EMPTY_BY_BASE: tuple[tuple[type, Any], ...] = (
    (ErrorCode, ErrorCode.none),
    (bool, False),
    (int, 0),
    (str, ""),
    (bytes, b""),
    (datetime.timedelta, datetime.timedelta(0)),
    (uuid.UUID, uuid.UUID(int=0)),
)
