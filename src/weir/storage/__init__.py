"""The log engine: segments, indexes, partition logs, recovery, retention, compaction.

Synchronous and protocol-free: no sockets, no event loop, no Kafka request types. Callers get
file slices to send and offsets; the broker decides what they mean on the wire.
"""

from weir.storage.config import LogConfig
from weir.storage.errors import OffsetOutOfRangeError, StorageError
from weir.storage.log_loader import LoadReport
from weir.storage.log_manager import LogManager, LogManagerConfig
from weir.storage.partition_log import AppendInfo, PartitionLog, ReadInfo
from weir.storage.segment import FileSlice, LogSegment

__all__ = [
    "AppendInfo",
    "FileSlice",
    "LoadReport",
    "LogConfig",
    "LogManager",
    "LogManagerConfig",
    "LogSegment",
    "OffsetOutOfRangeError",
    "PartitionLog",
    "ReadInfo",
    "StorageError",
]
