"""Protocol errors, split by whose fault they are, each carrying a Kafka error code.

`RemoteProtocolError`: the peer sent something we cannot accept (the connection is closed or
the request answered with the code). `ErrorCode` is Kafka's error table, taken from kio so that
numbers and retriability are Kafka's own.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = [
    "ErrorCode",
    "FrameTooLargeError",
    "InvalidFrameError",
    "InvalidRequestError",
    "RemoteProtocolError",
    "UnknownApiKeyError",
    "UnsupportedVersionError",
    "client_error_name",
]


class RemoteProtocolError(Exception):
    """The peer broke the protocol. `error_code` is what a response would carry, if any."""

    error_code: ErrorCode = ErrorCode.invalid_request


class InvalidFrameError(RemoteProtocolError):
    pass


class FrameTooLargeError(RemoteProtocolError):
    pass


class InvalidRequestError(RemoteProtocolError):
    """A request whose header or body does not decode."""


class UnknownApiKeyError(RemoteProtocolError):
    pass


class UnsupportedVersionError(RemoteProtocolError):
    error_code = ErrorCode.unsupported_version

    def __init__(self, message: str, *, api_key: int, api_version: int, correlation_id: int):
        super().__init__(message)
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


def client_error_name(code: int, local_name: str) -> str:
    """Kafka's name for an error a client library reports: the broker's own for Kafka's codes
    (`UNKNOWN_TOPIC_OR_PARTITION`, where librdkafka says `UNKNOWN_TOPIC_OR_PART`), else the
    library's `local_name` for its local errors (`_TRANSPORT`, `_AUTHENTICATION`, ...)."""
    if code > 0:
        try:
            return ErrorCode(code).name.upper()
        except ValueError:
            pass
    return local_name
