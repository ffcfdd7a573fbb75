"""What a console page can fail with, each with the HTTP status its page is served with.

`weir.ops.console.reader`, `browse` and `audit` translate the Kafka client's failures into these
at their boundary, once; `server` turns them into an error page. Anything else is a defect in
the console, which `server` logs and answers with a 500 page, never a traceback in the browser.
"""

from __future__ import annotations

from http import HTTPStatus


class ConsoleError(Exception):
    """A page that cannot be shown, and why, in words for the operator."""

    status = HTTPStatus.INTERNAL_SERVER_ERROR


class BadRequest(ConsoleError):
    """The request itself is wrong: a form field that is not a number, a bad timestamp."""

    status = HTTPStatus.BAD_REQUEST


class NotFound(ConsoleError):
    """No such page, topic, partition or group."""

    status = HTTPStatus.NOT_FOUND


class NotAuthorized(ConsoleError):
    """The cluster refused the console's principal (an ACL)."""

    status = HTTPStatus.FORBIDDEN


class ClusterError(ConsoleError):
    """The cluster could not be reached, refused the connection, or answered with an error."""

    status = HTTPStatus.BAD_GATEWAY
