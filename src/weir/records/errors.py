"""Errors for invalid record batches, each carrying the Kafka error code a client expects.

The numeric codes are Kafka's (see the protocol guide's error table); the protocol layer passes
them straight into responses.
"""

from __future__ import annotations


class RecordError(Exception):
    """A batch that must not be appended. `error_code` is the Kafka error code for the client;
    `record_errors` names the records at fault, (index in the batch, why), as Produce v8+
    reports them."""

    error_code: int = -1
    error_name: str = "UNKNOWN_SERVER_ERROR"

    def __init__(self, message: str, record_errors: tuple[tuple[int, str], ...] = ()) -> None:
        super().__init__(message)
        self.record_errors = record_errors


class CorruptRecordError(RecordError):
    error_code = 2
    error_name = "CORRUPT_MESSAGE"


class RecordTooLargeError(RecordError):
    error_code = 10
    error_name = "MESSAGE_TOO_LARGE"


class InvalidTimestampError(RecordError):
    error_code = 32
    error_name = "INVALID_TIMESTAMP"


class UnsupportedCompressionError(RecordError):
    error_code = 76
    error_name = "UNSUPPORTED_COMPRESSION_TYPE"


class InvalidRecordError(RecordError):
    error_code = 87
    error_name = "INVALID_RECORD"
