"""DescribeLogDirs (35): each of this broker's log directories (`log.dirs`) with the size of
every partition replica it holds and how far that replica's log end is behind the high
watermark, and (v4) the size and free space of the directory's volume — what
kafka-log-dirs.sh and `weir log-dirs describe` show. Needs DESCRIBE on the cluster, as in
Kafka. An offline directory is answered KAFKA_STORAGE_ERROR with no partitions; a request
naming topics is answered for those of their partitions held here."""

from __future__ import annotations

import datetime
import itertools
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.authz.acl import AclOperation
from weir.broker.authz.checks import cluster_error
from weir.broker.context import BrokerContext, make
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module
from weir.storage import PartitionLog
from weir.storage.checkpoint import TopicPartition
from weir.storage.log_dir import LogDirectory


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.DESCRIBE_LOG_DIRS, request.api_version)
    refused = cluster_error(broker, AclOperation.DESCRIBE)
    if refused is not ErrorCode.none:  # before v3 there is no error field: no directories
        return make(m.DescribeLogDirsResponse, throttle_time=datetime.timedelta(0),
                    error_code=refused, results=())  # fmt: skip
    topics = request.body.topics
    wanted = None if topics is None else {(t.topic, p) for t in topics for p in t.partitions}
    results = tuple(
        _describe(m, log_dir, held if wanted is None else [e for e in held if e[0] in wanted])
        for log_dir, held in broker.replicas.log_manager.by_directory()
    )
    return make(m.DescribeLogDirsResponse, throttle_time=datetime.timedelta(0),
                error_code=ErrorCode.none, results=results)  # fmt: skip


def _describe(
    m: Any, log_dir: LogDirectory, held: list[tuple[TopicPartition, PartitionLog]]
) -> Any:
    path = str(log_dir.path.absolute())
    if not log_dir.online:
        return make(m.DescribeLogDirsResult, error_code=ErrorCode.kafka_storage_error,
                    log_dir=path, topics=(), total_bytes=-1, usable_bytes=-1)  # fmt: skip
    topics = tuple(
        make(m.DescribeLogDirsTopic, name=topic, partitions=tuple(
            make(m.DescribeLogDirsPartition, partition_index=index, partition_size=log_.size,
                 offset_lag=max(0, log_.high_watermark - log_.log_end_offset),
                 is_future_key=False)
            for (_, index), log_ in entries
        ))
        for topic, entries in itertools.groupby(held, key=lambda entry: entry[0][0])
    )  # fmt: skip
    total, usable = log_dir.volume_bytes()
    return make(m.DescribeLogDirsResult, error_code=ErrorCode.none, log_dir=path, topics=topics,
                total_bytes=total, usable_bytes=usable)  # fmt: skip
