"""Produce (0): validate and append one batch per partition; acks 0, 1 and -1 (all) are the
same on a single node once the batch is in the log, except that acks=-1 on a topic whose
min.insync.replicas exceeds the single replica is refused (NOT_ENOUGH_REPLICAS), as Kafka refuses
it. acks=0 gets no response. Records a topic refuses are named in `record_errors`."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.context import BrokerContext, make
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module
from weir.protocol.errors import InvalidRequestError

VALID_ACKS = (0, 1, -1)


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.PRODUCE, request.api_version)
    body = request.body
    topics = []
    for topic in body.topic_data:
        partitions = []
        for data in topic.partition_data:
            response, message = _append(m, broker, topic.name, data, body.acks)
            if response.error_code != ErrorCode.none:
                where = f"{topic.name}-{data.index}"
                broker.request_log.refused(request, where, response.error_code, message)
            partitions.append(response)
        topics.append(
            make(m.TopicProduceResponse, name=topic.name, partition_responses=tuple(partitions))
        )
    if body.acks == 0:
        failed = [p for t in topics for p in t.partition_responses if p.error_code]
        if failed:  # no response is read: closing the connection is how Kafka tells the client
            raise InvalidRequestError(f"acks=0 produce failed with {failed[0].error_code.name}")
        return None
    return make(m.ProduceResponse, responses=tuple(topics), throttle_time=datetime.timedelta(0))


def _append(
    m: Any, broker: BrokerContext, topic: str, data: Any, acks: int
) -> tuple[Any, str | None]:
    """The partition's response, and the reason for its error if it has one."""
    if acks not in VALID_ACKS:
        message = f"acks={acks}"
        return _error(m, data.index, ErrorCode.invalid_required_acks, message), message
    if body_is_transactional(data.records):
        message = "transactions are not supported"
        return _error(m, data.index, ErrorCode.transactional_id_not_found, message), message
    result = broker.replicas.append(topic, data.index, data.records, acks=acks)
    record_errors: tuple[Any, ...] = ()
    if hasattr(m, "BatchIndexAndErrorMessage"):
        record_errors = tuple(
            make(m.BatchIndexAndErrorMessage, batch_index=i, batch_index_error_message=why)
            for i, why in result.record_errors
        )
    response = make(
        m.PartitionProduceResponse,
        index=data.index,
        error_code=result.error,
        base_offset=result.base_offset,
        log_append_time=_datetime(result.log_append_time),
        log_start_offset=result.log_start_offset,
        record_errors=record_errors,
        error_message=result.message,
    )
    return response, result.message


def body_is_transactional(records: bytes | None) -> bool:
    """Bit 4 of the batch attributes (byte 22) marks a transactional batch."""
    return records is not None and len(records) > 22 and bool(records[22] & 0x10)


def _error(m: Any, index: int, error: ErrorCode, message: str) -> Any:
    return make(
        m.PartitionProduceResponse,
        index=index,
        error_code=error,
        base_offset=-1,
        log_append_time=None,
        log_start_offset=-1,
        record_errors=(),
        error_message=message,
    )


def _datetime(milliseconds: int) -> datetime.datetime | None:
    if milliseconds < 0:
        return None
    return datetime.datetime.fromtimestamp(milliseconds / 1000, tz=datetime.UTC)
