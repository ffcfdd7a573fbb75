"""AlterClientQuotas (49): set or remove quota configs of users, client ids and users' client
ids (or their `<default>`s), where the cluster keeps them, in effect at once on every broker.
AlterConfigs on the cluster is required, as Kafka requires it. Each entry is checked whole and
written in one step, so a refused entry changes nothing; `validate_only` only checks."""

from __future__ import annotations

import asyncio
import datetime
import logging
from typing import Any

from kazoo.exceptions import KazooException
from kio.schema.errors import ErrorCode

from weir.broker.authz.acl import AclOperation
from weir.broker.authz.checks import cluster_error
from weir.broker.client_quotas import ClientQuotas
from weir.broker.context import BrokerContext, make
from weir.broker.quota_admin import QuotaOp, QuotaRequestError, alteration, parse_entity
from weir.cluster.zookeeper import ZooKeeperUnavailableError
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module

log = logging.getLogger(__name__)


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.ALTER_CLIENT_QUOTAS, request.api_version)
    refused = cluster_error(broker, AclOperation.ALTER_CONFIGS)
    entries = []
    for entry in request.body.entries:
        if refused:
            error, message = refused, None
        else:
            error, message = await _alter(broker.quotas, entry, request.body.validate_only)
        entries.append(make(
            m.EntryData, error_code=error, error_message=message,
            entity=tuple(make(m.EntityData, entity_type=e.entity_type, entity_name=e.entity_name)
                         for e in entry.entity),
        ))  # fmt: skip
    return make(m.AlterClientQuotasResponse, throttle_time=datetime.timedelta(0),
                entries=tuple(entries))  # fmt: skip


async def _alter(
    quotas: ClientQuotas | None, entry: Any, validate_only: bool
) -> tuple[ErrorCode, str | None]:
    if quotas is None:
        return ErrorCode.unknown_server_error, "client quotas are not kept"
    try:
        entity = parse_entity((e.entity_type, e.entity_name) for e in entry.entity)
        change = alteration([QuotaOp(op.key, op.value, op.remove) for op in entry.ops])
        if validate_only:
            return ErrorCode.none, None
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, quotas.store.alter, entity, change)
    except QuotaRequestError as exc:
        return exc.error, exc.message
    except (ZooKeeperUnavailableError, KazooException) as exc:
        return ErrorCode.request_timed_out, f"ZooKeeper refused the change: {exc!r}"
    except OSError as exc:
        return ErrorCode.kafka_storage_error, f"client quotas not written: {exc}"
    log.info("client quotas of %s: %s", entity.path, dict(quotas.store.configs().get(entity, {})))
    quotas.reload()
    return ErrorCode.none, None
