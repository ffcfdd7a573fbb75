"""InitProducerId (22): producer ids for idempotent producers. An existing id and epoch in the
request (v3+, KIP-360) get the epoch bumped; transactional ids are not supported."""

from __future__ import annotations

import datetime
import logging
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.context import BrokerContext, make
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module

log = logging.getLogger(__name__)

MAX_EPOCH = 2**15 - 1


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.INIT_PRODUCER_ID, request.api_version)
    body = request.body
    if body.transactional_id is not None:
        return _refusal(m, ErrorCode.transactional_id_authorization_failed)
    producer_id = getattr(body, "producer_id", -1)
    epoch = getattr(body, "producer_epoch", -1)
    if producer_id >= 0 and 0 <= epoch < MAX_EPOCH:
        epoch += 1
    else:
        try:
            producer_id, epoch = broker.producer_ids.next_id(), 0
        except OSError as exc:  # a new block of ids could not be recorded (a full disk)
            log.warning("no producer id: %s", exc)
            return _refusal(m, ErrorCode.coordinator_not_available)
    return make(
        m.InitProducerIdResponse,
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        producer_id=producer_id,
        producer_epoch=epoch,
    )


def _refusal(m: Any, error: ErrorCode) -> Any:
    return make(
        m.InitProducerIdResponse,
        throttle_time=datetime.timedelta(0),
        error_code=error,
        producer_id=-1,
        producer_epoch=-1,
    )
