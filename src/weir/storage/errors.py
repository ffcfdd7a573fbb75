"""Storage errors, each carrying the Kafka error code the broker returns for it."""

from __future__ import annotations


class StorageError(Exception):
    error_code: int = -1  # UNKNOWN_SERVER_ERROR


class OffsetOutOfRangeError(StorageError):
    error_code = 1


class CorruptIndexError(StorageError):
    error_code = 2


class LogDirectoryError(StorageError):
    """The log directory failed (an I/O error, or a failed write that could not be undone): its
    logs go offline."""

    error_code = 56  # KAFKA_STORAGE_ERROR


class LogWriteError(StorageError):
    """A write failed for want of space or descriptors and was undone; the log is unchanged
    and takes writes again once there is room."""

    error_code = 56  # KAFKA_STORAGE_ERROR


class InvalidOffsetError(StorageError):
    error_code = 87
