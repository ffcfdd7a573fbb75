"""DescribeLogDirs (35): each of this broker's log directories (`log.dirs`) with the size of
every partition replica it holds and how far that replica's log end is behind the high
watermark, and (v4) the size and free space of the directory's volume — what
kafka-log-dirs.sh and `weir log-dirs describe` show. Needs DESCRIBE on the cluster, as in
Kafka. An offline directory is answered KAFKA_STORAGE_ERROR with no partitions; a request
naming topics is answered for those of their partitions held here. A replica moving to another
directory (AlterReplicaLogDirs) shows there too, as its future log (`is_future_key`), with how
far its copy is behind the current log as its offset lag."""

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
    logs = broker.replicas.log_manager
    futures: dict[int, list[_Replica]] = {}
    for moving in logs.futures():
        futures.setdefault(id(moving.log_dir), []).append(
            (moving.tp, moving.log, moving.offset_lag, True)
        )
    results = tuple(
        _describe(m, log_dir, [r for r in [*_current(held), *futures.get(id(log_dir), [])]
                               if wanted is None or r[0] in wanted])
        for log_dir, held in logs.by_directory()
    )  # fmt: skip
    return make(m.DescribeLogDirsResponse, throttle_time=datetime.timedelta(0),
                error_code=ErrorCode.none, results=results)  # fmt: skip


#: a replica in a directory: its partition, log, offset lag and whether it is a future log
_Replica = tuple[TopicPartition, PartitionLog, int, bool]


def _current(held: list[tuple[TopicPartition, PartitionLog]]) -> list[_Replica]:
    return [
        (tp, log_, max(0, log_.high_watermark - log_.log_end_offset), False) for tp, log_ in held
    ]


def _describe(m: Any, log_dir: LogDirectory, held: list[_Replica]) -> Any:
    path = str(log_dir.path.absolute())
    if not log_dir.online:
        return make(m.DescribeLogDirsResult, error_code=ErrorCode.kafka_storage_error,
                    log_dir=path, topics=(), total_bytes=-1, usable_bytes=-1)  # fmt: skip
    topics = tuple(
        make(m.DescribeLogDirsTopic, name=topic, partitions=tuple(
            make(m.DescribeLogDirsPartition, partition_index=index, partition_size=log_.size,
                 offset_lag=lag, is_future_key=future)
            for (_, index), log_, lag, future in entries
        ))
        for topic, entries in itertools.groupby(
            sorted(held, key=lambda r: (r[0], r[3])), key=lambda r: r[0][0]
        )
    )  # fmt: skip
    total, usable = log_dir.volume_bytes()
    return make(m.DescribeLogDirsResult, error_code=ErrorCode.none, log_dir=path, topics=topics,
                total_bytes=total, usable_bytes=usable)  # fmt: skip
