"""Client quotas, as Kafka's ClientQuotaManager applies them: byte rates for produce
(`producer_byte_rate`) and fetch (`consumer_byte_rate`), and the share of the broker's request
handling a client may use (`request_percentage`), each bound to a user, a client id, a user's
client id, or one of their `<default>`s.

Which config applies to a connection's (user, client id) is Kafka's order, most specific first:

    1. /config/users/<user>/clients/<client-id>      5. /config/users/<default>/clients/<default>
    2. /config/users/<user>/clients/<default>        6. /config/users/<default>
    3. /config/users/<user>                          7. /config/clients/<client-id>
    4. /config/users/<default>/clients/<client-id>   8. /config/clients/<default>

each quota type on its own. Clients whose quota comes from the same entity share its rate (all
of alice's client ids under /config/users/alice), those under a `<default>` each have their own,
as Kafka's metric tags decide.

A request is never refused for being over quota: its value is recorded, the response carries the
throttle time (`quota_rate.throttle_time_ms`), and the connection is muted for that long after the
response is sent (KIP-219; for Produce before v6 and Fetch before v8, whose clients do not
throttle themselves, the response waits instead). A broker with no quota of a type configured
spends one check of an empty dict per request on it.

`request_percentage` on a single event loop: the time the loop spends running the handlers of a
client's requests (each step up to a wait, not the waits; decoding and encoding are left out) as
a percentage of the window, 100 being all of the one loop, where Kafka counts the time of its
request handler and network threads. Requests from other brokers and the SASL exchange are not
counted, as Kafka exempts them; a Fetch response carries only the byte-rate throttle (it is
encoded before its handler's time is known), though the connection waits out the longer one.

Thread-safety (docs/threads.md): event-loop only; the store's change notifications are handed to
the loop.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Generator, Mapping
from typing import Any, Generic, Protocol, TypeVar, cast

from weir.broker.quota_rate import QuotaWindow, SampledRate, throttle_time_ms
from weir.broker.security.session import ANONYMOUS, current_session
from weir.clock import Clock
from weir.cluster.client_quota_configs import QuotaConfigs, QuotaEntity
from weir.cluster.entity_configs import ConfigChange
from weir.cluster.znodes import DEFAULT_ENTITY

log = logging.getLogger(__name__)
T = TypeVar("T")

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
#: the quota configs and whether each takes whole numbers only (Kafka's LONG) or any (DOUBLE)
QUOTA_KEYS: Mapping[str, bool] = {
    PRODUCER_BYTE_RATE: True,
    CONSUMER_BYTE_RATE: True,
    REQUEST_PERCENTAGE: False,
}
#: the longest throttle Kafka's int32 throttle_time_ms can carry
MAX_THROTTLE_MS = 2**31 - 1

#: a quota's sharing key (user, client id; "" where the rate is not per that part) and bound
Quota = tuple[tuple[str, str], float]


class ClientQuotaStore(Protocol):
    """Where the client quota configs live: ZooKeeper in a cluster, the embedded store on one
    node."""

    def configs(self) -> QuotaConfigs: ...

    def alter(self, entity: QuotaEntity, change: ConfigChange) -> dict[str, str]: ...


class ClientQuotaManager:
    """One quota type: its bounds per entity and the rates of the clients they apply to."""

    def __init__(self, key: str, window: QuotaWindow, clock: Clock, max_throttle_ms: int) -> None:
        self.key = key
        self.window = window
        self.max_throttle_ms = max_throttle_ms
        self._clock = clock
        self._bounds: dict[QuotaEntity, float] = {}
        self._rates: dict[tuple[str, str], SampledRate] = {}
        self._resolved: dict[tuple[str, str], Quota | None] = {}
        self._last_sweep_ms = 0
        #: (user, client id) -> [responses throttled, milliseconds of throttle], for the metrics
        self.throttled: dict[tuple[str, str], list[int]] = {}

    @property
    def enabled(self) -> bool:
        """Whether any entity has a quota of this type."""
        return bool(self._bounds)

    def update(self, bounds: Mapping[QuotaEntity, float]) -> None:
        """Take up new bounds; the rates measured so far are kept."""
        self._bounds = dict(bounds)
        self._resolved = {}
        if not self._bounds:
            self._rates = {}

    def record(self, user: str, client_id: str, value: float) -> int:
        """Add `value` to the client's rate; the throttle time in ms (0: within its quota)."""
        if not self._bounds:
            return 0
        quota = self.quota(user, client_id)
        if quota is None:
            return 0
        tags, bound = quota
        now_ms = self._clock.monotonic_ms()
        if now_ms - self._last_sweep_ms >= self.window.span_ms:
            self._sweep(now_ms)
        rate = self._rates.get(tags)
        if rate is None:
            rate = self._rates[tags] = SampledRate(self.window)
        rate.record(value, now_ms)
        measured = rate.measure(now_ms)
        throttle_ms = throttle_time_ms(
            measured, bound, rate.window_size_ms(now_ms), self.max_throttle_ms
        )
        if throttle_ms:
            counts = self.throttled.setdefault((user, client_id), [0, 0])
            counts[0] += 1
            counts[1] += throttle_ms
        return throttle_ms

    def _sweep(self, now_ms: int) -> None:
        """Forget the clients that sent nothing within all the windows (their rates are 0, as
        new ones would be), so clients that come and go do not pile up (Kafka expires their
        sensors too)."""
        self._last_sweep_ms = now_ms
        self._rates = {tags: r for tags, r in self._rates.items() if not r.idle(now_ms)}
        self._resolved = {}

    @property
    def clients_measured(self) -> int:
        """How many rates are kept (clients, or groups of them sharing a quota)."""
        return len(self._rates)

    def unrecord(self, user: str, client_id: str, value: float) -> None:
        """Take back a recorded value (a throttled fetch returns no records)."""
        quota = self.quota(user, client_id) if self._bounds else None
        rate = self._rates.get(quota[0]) if quota is not None else None
        if rate is not None:
            rate.record(-value, self._clock.monotonic_ms())

    def max_value_in_window(self, user: str, client_id: str) -> float | None:
        """The most a client may take within the window (Kafka caps a fetch's bytes to it);
        None without a quota."""
        quota = self.quota(user, client_id) if self._bounds else None
        if quota is None:
            return None
        return quota[1] * (self.window.samples - 1) * self.window.size_ms / 1000

    def quota(self, user: str, client_id: str) -> Quota | None:
        """The quota that applies to (user, client id), and whose rate it shares."""
        key = (user, client_id)
        if key not in self._resolved:
            tags = self._sharing(user, client_id)
            bound = self._bound(*tags)
            self._resolved[key] = None if bound is None else (tags, bound)
        return self._resolved[key]

    def _sharing(self, user: str, client_id: str) -> tuple[str, str]:
        """Kafka's metric tags: which clients measure against one rate."""
        has = self._bounds.__contains__
        if has(QuotaEntity(user, client_id)) or has(QuotaEntity(user, DEFAULT_ENTITY)):
            return user, client_id
        if has(QuotaEntity(user)):
            return user, ""
        if has(QuotaEntity(DEFAULT_ENTITY, client_id)) or has(
            QuotaEntity(DEFAULT_ENTITY, DEFAULT_ENTITY)
        ):
            return user, client_id
        if has(QuotaEntity(DEFAULT_ENTITY)):
            return user, ""
        return "", client_id

    def _bound(self, user: str, client_id: str) -> float | None:
        """The bound for a rate's tags, most specific entity first."""
        if user and client_id:
            candidates = [QuotaEntity(user, client_id), QuotaEntity(user, DEFAULT_ENTITY),
                          QuotaEntity(DEFAULT_ENTITY, client_id),
                          QuotaEntity(DEFAULT_ENTITY, DEFAULT_ENTITY)]  # fmt: skip
        elif user:
            candidates = [QuotaEntity(user), QuotaEntity(DEFAULT_ENTITY)]
        elif client_id:
            candidates = [QuotaEntity(None, client_id), QuotaEntity(None, DEFAULT_ENTITY)]
        else:
            return None
        return next((self._bounds[e] for e in candidates if e in self._bounds), None)


class ClientQuotas:
    """The broker's three quota managers, fed from the quota configs in the store."""

    def __init__(self, store: ClientQuotaStore, window: QuotaWindow, clock: Clock) -> None:
        self.store = store
        self.produce = ClientQuotaManager(PRODUCER_BYTE_RATE, window, clock, MAX_THROTTLE_MS)
        self.fetch = ClientQuotaManager(CONSUMER_BYTE_RATE, window, clock, MAX_THROTTLE_MS)
        # Kafka bounds a request-time throttle to one window (ClientRequestQuotaManager)
        self.request = ClientQuotaManager(REQUEST_PERCENTAGE, window, clock, window.size_ms)
        self.reload()

    def reload(self) -> None:
        """Take up the store's current configs (on the loop)."""
        configs = self.store.configs()
        for manager in (self.produce, self.fetch, self.request):
            manager.update(_bounds(configs, manager.key))

    def follow(self, loop: asyncio.AbstractEventLoop) -> Callable[[QuotaEntity], None]:
        """A change listener for the store's notifications (any thread): reload on `loop`."""

        def changed(_entity: QuotaEntity) -> None:
            loop.call_soon_threadsafe(self.reload)

        return changed


def _bounds(configs: QuotaConfigs, key: str) -> dict[QuotaEntity, float]:
    bounds = {}
    for entity, config in configs.items():
        if key not in config:
            continue
        try:
            value = float(config[key])
        except ValueError:
            log.warning("client quota %s of %s left out: %r", key, entity.path, config[key])
            continue
        if math.isfinite(value) and value >= 0:
            bounds[entity] = value
    return bounds


def client_identity(client_id: str | None) -> tuple[str, str]:
    """(user, client id) of the request being served, as quotas name them."""
    session = current_session()
    principal = session.principal if session is not None else ANONYMOUS
    return principal.name, client_id or ""


def throttle_connection(throttle_ms: int, *, client_throttles: bool = True) -> None:
    """Mute the connection of the request being served for `throttle_ms` once its response is
    sent (the longest of the throttles set while serving it); with `client_throttles` False
    (a version from before KIP-219) the response waits that long instead."""
    session = current_session()
    if session is None or throttle_ms <= session.throttle_ms:
        return
    session.throttle_ms = throttle_ms
    session.throttle_before_response = not client_throttles


class BusyTime(Generic[T]):
    """Awaits an awaitable and adds up the time the event loop spends running it (each of its
    steps up to the next suspension), not the time it waits: a request's share of the loop."""

    __slots__ = ("_awaitable", "busy_ns")

    def __init__(self, awaitable: Awaitable[T]) -> None:
        self._awaitable = awaitable
        self.busy_ns = 0

    def __await__(self) -> Generator[Any, Any, T]:
        steps = self._awaitable.__await__()
        value: Any = None
        error: BaseException | None = None
        while True:
            started = time.perf_counter_ns()
            try:
                yielded = steps.send(value) if error is None else steps.throw(error)
            except StopIteration as done:
                return cast(T, done.value)
            finally:
                self.busy_ns += time.perf_counter_ns() - started
            try:
                value, error = (yield yielded), None
            except GeneratorExit:
                steps.close()
                raise
            except BaseException as exc:  # cancellation: handed to the awaitable
                value, error = None, exc


def busy_percentage(busy_ns: int) -> float:
    """Time the loop spent, as the request quota counts it: a percentage of one second."""
    return busy_ns / 10_000_000
