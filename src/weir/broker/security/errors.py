"""Errors of authentication and of security settings, with the Kafka error code they map to."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from weir.protocol.errors import RemoteProtocolError


class SaslAuthenticationError(Exception):
    """The client's SASL exchange failed: SASL_AUTHENTICATION_FAILED, then the connection is
    closed. The message is sent to the client."""

    error_code = ErrorCode.sasl_authentication_failed


class SecurityConfigError(ValueError):
    """A security setting that cannot be used: the broker does not start."""


class IllegalSaslStateError(RemoteProtocolError):
    """A request the connection's SASL state does not allow (anything but ApiVersions and the
    SASL requests before authentication, a failed raw token): the connection is closed."""
