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
