"""Storage errors, each carrying the Kafka error code the broker returns for it."""

from __future__ import annotations


class StorageError(Exception):
    error_code: int = -1  # UNKNOWN_SERVER_ERROR


class OffsetOutOfRangeError(StorageError):
    error_code = 1


class CorruptIndexError(StorageError):
    error_code = 2


class LogDirectoryError(StorageError):
    error_code = 57  # KAFKA_STORAGE_ERROR


class InvalidOffsetError(StorageError):
    error_code = 87
