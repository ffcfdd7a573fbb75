"""InitProducerId (22): producer ids. An idempotent producer gets a fresh id, or its epoch bumped
when it names its id and epoch (v3+, KIP-360). A transactional producer's id comes from the
transaction coordinator, which fences older producers of the same transactional id."""

from __future__ import annotations

import datetime
import logging
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.context import BrokerContext, fenced_error, make
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module

log = logging.getLogger(__name__)

MAX_EPOCH = 2**15 - 1
#: the first version whose clients understand PRODUCER_FENCED (KIP-588)
FENCED_SINCE = 4


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.INIT_PRODUCER_ID, request.api_version)
    body = request.body
    producer_id = getattr(body, "producer_id", -1)
    epoch = getattr(body, "producer_epoch", -1)
    if body.transactional_id is not None:
        return await _transactional(broker, request, m, producer_id, epoch)
    if producer_id >= 0 and 0 <= epoch < MAX_EPOCH:
        epoch += 1
    else:
        try:
            producer_id, epoch = broker.producer_ids.next_id(), 0
        except OSError as exc:  # a new block of ids could not be recorded (a full disk)
            log.warning("no producer id: %s", exc)
            return _response(m, ErrorCode.coordinator_not_available)
    return _response(m, ErrorCode.none, producer_id, epoch)


async def _transactional(
    broker: BrokerContext, request: Request, m: Any, producer_id: int, epoch: int
) -> Any:
    if broker.transactions is None:
        return _response(m, ErrorCode.coordinator_not_available)
    body = request.body
    timeout_ms = round(body.transaction_timeout.total_seconds() * 1000)
    result = await broker.transactions.init_producer_id(
        body.transactional_id, timeout_ms, producer_id, epoch
    )
    error = result.error
    if error is ErrorCode.producer_fenced:
        error = fenced_error(request.api_version, FENCED_SINCE)
    return _response(m, error, result.producer_id, result.producer_epoch)


def _response(m: Any, error: ErrorCode, producer_id: int = -1, epoch: int = -1) -> Any:
    return make(
        m.InitProducerIdResponse,
        throttle_time=datetime.timedelta(0),
        error_code=error,
        producer_id=producer_id,
        producer_epoch=epoch,
    )
