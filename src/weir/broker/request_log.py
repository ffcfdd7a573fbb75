"""What the broker tells an operator about requests: a request log at DEBUG level (API, version,
client id, latency, error codes) and a WARNING when a client is refused for a reason that is not
part of a client's routine (a wrong config, a bad record, an unsupported feature), so whoever
debugs a failing client has a broker-side trace. Warnings for the same API and error are logged
at most once per interval, with a count.

Fetch responses (record bytes sent by sendfile) are not inspected for error codes; Produce
reports its refusals itself through `refused` (old Produce versions carry no error message, and
the reason is what an operator needs).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.metrics.stats import BrokerStats
from weir.clock import Clock
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request

log = logging.getLogger("weir.broker.requests")

WARNING_INTERVAL_MS = 10_000

#: errors clients meet in normal operation and handle by themselves: not worth a warning
ROUTINE_ERRORS = frozenset({
    ErrorCode.none,
    ErrorCode.not_coordinator,
    ErrorCode.coordinator_not_available,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.rebalance_in_progress,
    ErrorCode.unknown_member_id,
    ErrorCode.member_id_required,
    ErrorCode.illegal_generation,
    ErrorCode.leader_not_available,
    ErrorCode.unknown_topic_or_partition,
    ErrorCode.not_leader_or_follower,
    ErrorCode.topic_already_exists,
    ErrorCode.offset_out_of_range,
    ErrorCode.group_id_not_found,
    ErrorCode.election_not_needed,  # the usual answer of kafka-leader-election.sh --all-...
    ErrorCode.kafka_storage_error,  # logged where the disk refused
})  # fmt: skip


class RequestLog:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._last_warning: dict[tuple[int, ErrorCode], int] = {}
        self._suppressed: dict[tuple[int, ErrorCode], int] = {}
        #: where requests are counted for the metrics endpoint; None: not counted
        self.stats: BrokerStats | None = None

    def record(self, request: Request, response: Any, started_ms: int) -> None:
        """Log a handled request; `response` is the handler's result (None or a kio message)."""
        errors = _response_errors(request, response)
        if self.stats is not None:
            self.stats.answered(request.api_key, request.api_version, [c for _, c in errors])
        if log.isEnabledFor(logging.DEBUG):
            self._debug(request, started_ms, errors)
        if request.api_key == ApiKey.PRODUCE:
            return  # Produce reports its refusals with their reasons (`refused`)
        for path, code in errors:
            if code not in ROUTINE_ERRORS:
                self._warn(request, path, code, _message_near(response, path))

    def refused(self, request: Request, path: str, code: ErrorCode, message: str | None) -> None:
        """A refusal a handler reports with its reason (logged unless routine)."""
        if code not in ROUTINE_ERRORS:
            self._warn(request, path, code, message)

    def _debug(
        self, request: Request, started_ms: int, errors: list[tuple[str, ErrorCode]]
    ) -> None:
        log.debug(
            "%s v%d from %s (correlation %d) in %d ms%s",
            _api_name(request.api_key), request.api_version, request.client_id,
            request.correlation_id, self._clock.monotonic_ms() - started_ms,
            "".join(f" {path}={code.name}" for path, code in errors),
        )  # fmt: skip

    def _warn(self, request: Request, path: str, code: ErrorCode, message: str | None) -> None:
        key = (request.api_key, code)
        now = self._clock.monotonic_ms()
        last = self._last_warning.get(key)
        if last is not None and now - last < WARNING_INTERVAL_MS:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return
        more = self._suppressed.pop(key, 0)
        self._last_warning[key] = now
        log.warning(
            "refused %s v%d from client %s: %s %s%s%s",
            _api_name(request.api_key), request.api_version, request.client_id, path,
            code.name.upper(), f": {message}" if message else "",
            f" ({more} more like it since the last report)" if more else "",
        )  # fmt: skip


def _response_errors(request: Request, response: Any) -> list[tuple[str, ErrorCode]]:
    """(where, code) of the error codes other than NONE a response carries: a Produce
    response's per partition, any other message's wherever they are nested. Fetch responses
    (sent as file slices) are not inspected."""
    if response is None or request.api_key == ApiKey.FETCH:
        return []
    if request.api_key == ApiKey.PRODUCE:
        return [(f"{topic.name}-{p.index}", p.error_code) for topic in response.responses
                for p in topic.partition_responses if p.error_code != ErrorCode.none]  # fmt: skip
    return [(path, code) for path, code in _error_codes(response) if code != ErrorCode.none]


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"API {api_key}"


def _error_codes(message: Any, path: str = "") -> Iterator[tuple[str, ErrorCode]]:
    """(where, code) of every error code in a kio message, nested messages included."""
    fields = getattr(message, "__dataclass_fields__", None)
    if fields is None:
        return
    label = _label(message, path)
    for name in fields:
        value = getattr(message, name)
        if name == "error_code" and isinstance(value, ErrorCode):
            yield label, value
        elif isinstance(value, tuple):
            for item in value:
                yield from _error_codes(item, label)


def _label(message: Any, path: str) -> str:
    """A nested message's name for the log: its topic, resource or group, and partition."""
    base = path
    for name in ("name", "resource_name", "group_id", "topic"):
        value = getattr(message, name, None)
        if isinstance(value, str):
            base = value
            break
    index = getattr(message, "partition_index", getattr(message, "index", None))
    return f"{base}-{index}" if isinstance(index, int) else base


def _message_near(response: Any, path: str, parent: str = "") -> str | None:
    """The error message reported beside the error at `path`, if the response carries one."""
    fields = getattr(response, "__dataclass_fields__", None)
    if fields is None:
        return None
    label = _label(response, parent)
    if label == path:
        for name in ("error_message", "error_string"):
            text = getattr(response, name, None)
            if isinstance(text, str):
                return text
    for name in fields:
        value = getattr(response, name)
        if isinstance(value, tuple):
            for item in value:
                found = _message_near(item, path, label)
                if found:
                    return found
    return None
