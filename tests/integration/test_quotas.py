"""Client quotas on a real broker: DescribeClientQuotas / AlterClientQuotas round trips in raw
requests and through `weir quota` (kafka-configs.sh's flags and output), Kafka's errors for bad
input with nothing applied, and byte-rate quotas holding a confluent-kafka producer and consumer
to their rates (KIP-219: throttle_time_ms reported, the connection muted, nothing refused)."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from broker_process import BrokerProcess, weir
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.alter_client_quotas.v1 import request as alter_v1
from kio.schema.describe_client_quotas.v1 import request as describe_v1
from kio.schema.errors import ErrorCode
from kio.static.primitive import f64, i8

from weir.cli.broker_socket import BrokerConnection
from weir.protocol.apis import ApiKey
from weir.protocol.client_settings import ClientSecurity

TIMEOUT = 30
EXACT, DEFAULT, SPECIFIED = 0, 1, 2
#: the quota the producer and consumer are held to, and how long they run against it: long
#: enough for two of the quota's cycles (see `rate_over_quota_cycles`)
BOUND = 128 * 1024
RUN_S = 27.0
Entity = tuple[tuple[str, str | None], ...]


def connect(broker: BrokerProcess, client_id: str) -> BrokerConnection:
    host, port = broker.bootstrap.rsplit(":", 1)
    return BrokerConnection(
        host, int(port), ClientSecurity.of({}), timeout=TIMEOUT, client_id=client_id
    )


@pytest.fixture
def raw(broker: BrokerProcess) -> Iterator[BrokerConnection]:
    with connect(broker, "quota-admin") as connection:
        yield connection


def alter(
    raw: BrokerConnection, entity: Entity, validate_only: bool = False, **ops: float | None
) -> Any:
    """AlterClientQuotas of one entry: each key set to its value, removed where None; the
    entry's result."""
    request = alter_v1.AlterClientQuotasRequest(
        entries=(alter_v1.EntryData(
            entity=tuple(alter_v1.EntityData(entity_type=t, entity_name=n) for t, n in entity),
            ops=tuple(alter_v1.OpData(key=k, value=f64(float(v or 0)), remove=v is None)
                      for k, v in ops.items()),
        ),),
        validate_only=validate_only,
    )  # fmt: skip
    [entry] = raw.call(ApiKey.ALTER_CLIENT_QUOTAS, 1, request).entries
    return entry


def describe(
    raw: BrokerConnection, *components: tuple[str, int, str | None], strict: bool = False
) -> Any:
    request = describe_v1.DescribeClientQuotasRequest(
        components=tuple(describe_v1.ComponentData(entity_type=t, match_type=i8(m), match=n)
                         for t, m, n in components),
        strict=strict,
    )  # fmt: skip
    return raw.call(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, request)


def quotas(raw: BrokerConnection, *components: tuple[str, int, str | None],
           strict: bool = False) -> dict[Entity, dict[str, float]]:  # fmt: skip
    response = describe(raw, *components, strict=strict)
    assert response.error_code == ErrorCode.none, response.error_message
    return {
        tuple((e.entity_type, e.entity_name) for e in entry.entity):
            {v.key: v.value for v in entry.values}
        for entry in response.entries
    }  # fmt: skip


ALICE_APP: Entity = (("user", "alice"), ("client-id", "app"))


def test_alter_and_describe_round_trip(raw: BrokerConnection) -> None:
    assert quotas(raw) == {}
    done = alter(raw, ALICE_APP, producer_byte_rate=1024, consumer_byte_rate=2048)
    assert (done.error_code, done.error_message) == (ErrorCode.none, None)
    assert alter(raw, (("client-id", None),), request_percentage=12.5).error_code == ErrorCode.none
    assert alter(raw, (("user", None),), producer_byte_rate=4096).error_code == ErrorCode.none
    assert quotas(raw) == {
        (("user", None),): {"producer_byte_rate": 4096.0},
        ALICE_APP: {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0},
        (("client-id", None),): {"request_percentage": 12.5},
    }
    # strict: only entities made of exactly the filter's types
    assert list(quotas(raw, ("client-id", DEFAULT, None), strict=True)) == [(("client-id", None),)]
    assert list(quotas(raw, ("user", EXACT, "alice"), strict=True)) == []
    assert list(quotas(raw, ("user", EXACT, "alice"))) == [ALICE_APP]
    assert list(quotas(raw, ("user", SPECIFIED, None), ("client-id", EXACT, "app"),
                       strict=True)) == [ALICE_APP]  # fmt: skip
    # remove=true takes a key away; an entity with none left is not described
    assert alter(raw, ALICE_APP, consumer_byte_rate=None).error_code == ErrorCode.none
    assert quotas(raw, ("user", EXACT, "alice"))[ALICE_APP] == {"producer_byte_rate": 1024.0}
    assert alter(raw, ALICE_APP, producer_byte_rate=None).error_code == ErrorCode.none
    assert ALICE_APP not in quotas(raw)


def test_validate_only_checks_and_applies_nothing(raw: BrokerConnection) -> None:
    assert alter(raw, ALICE_APP, validate_only=True, producer_byte_rate=1).error_code == 0
    refused = alter(raw, ALICE_APP, validate_only=True, producer_byte_rate=-1)
    assert refused.error_code == ErrorCode.invalid_request
    assert quotas(raw) == {}


@pytest.mark.parametrize(("entity", "ops", "message"), [
    ((("group", "g"),), {"producer_byte_rate": 1024}, "Unhandled client quota entity type: group"),
    (ALICE_APP, {"consumer_byte_rate": 10, "fetch_byte_rate": 1024},
     "Invalid configuration key fetch_byte_rate"),
    (ALICE_APP, {"consumer_byte_rate": 10, "producer_byte_rate": -5},
     "Invalid value -5.0 for configuration producer_byte_rate: Value must be at least 0"),
    (ALICE_APP, {"producer_byte_rate": 1.5},
     "Configuration producer_byte_rate must be a LONG value"),
    ((("user", ""),), {"producer_byte_rate": 1}, "Empty user not supported"),
    ((), {"producer_byte_rate": 1}, "Invalid empty client quota entity"),
])  # fmt: skip
def test_bad_alterations_are_refused_with_nothing_applied(
    raw: BrokerConnection, entity: Entity, ops: dict[str, float], message: str
) -> None:
    alter(raw, ALICE_APP, consumer_byte_rate=7)
    refused = alter(raw, entity, **ops)
    assert (refused.error_code, refused.error_message) == (ErrorCode.invalid_request, message)
    assert quotas(raw) == {ALICE_APP: {"consumer_byte_rate": 7.0}}


def test_unknown_entity_type_in_a_filter_is_refused(raw: BrokerConnection) -> None:
    response = describe(raw, ("group", EXACT, "g"))
    assert response.error_code == ErrorCode.unsupported_version
    assert response.error_message == "Custom entity type 'group' not supported"
    assert response.entries is None


def test_quota_cli_round_trip_and_restart(broker: BrokerProcess) -> None:
    def quota(*args: str) -> Any:
        return weir("quota", *args, "--bootstrap-server", broker.bootstrap)

    done = quota("alter", "--entity-type", "users", "--entity-name", "alice", "--entity-type",
                 "clients", "--entity-name", "app",
                 "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Completed updating config for user alice.\n"
    done = quota("alter", "--entity-type", "clients", "--entity-default",
                 "--add-config", "request_percentage=50")  # fmt: skip
    assert done.stdout == "Completed updating default config for clients in the cluster.\n"
    broker.restart()
    shown = quota("describe", "--entity-type", "users", "--entity-name", "alice",
                  "--entity-type", "clients", "--entity-name", "app")  # fmt: skip
    assert shown.stdout == (
        "Quota configs for user-principal 'alice', client-id 'app' are "
        "consumer_byte_rate=2048.0, producer_byte_rate=1024.0\n"
    )
    shown = quota("describe", "--entity-type", "clients")
    assert shown.stdout == "Quota configs for the default client-id are request_percentage=50.0\n"
    done = quota("alter", "--entity-type", "clients", "--entity-default",
                 "--delete-config", "request_percentage")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert quota("describe", "--entity-type", "clients").stdout == ""


@pytest.mark.parametrize(("args", "status", "error"), [
    (["--entity-type", "clients", "--entity-name", "a", "--add-config", "fetch_rate=1"], 1,
     "weir: INVALID_REQUEST: Invalid configuration key fetch_rate"),
    (["--entity-type", "clients", "--entity-name", "a", "--add-config", "producer_byte_rate=-1"],
     1, "Value must be at least 0"),
    (["--entity-type", "clients", "--entity-name", "a", "--add-config", "producer_byte_rate=x"],
     1, "weir: Cannot parse quota configuration value for producer_byte_rate: x"),
    (["--entity-type", "groups", "--entity-name", "a", "--add-config", "producer_byte_rate=1"],
     2, "invalid choice: 'groups'"),
    (["--entity-type", "clients", "--add-config", "producer_byte_rate=1"], 2,
     "--entity-name or --entity-default must be given with each --entity-type"),
])  # fmt: skip
def test_quota_cli_bad_input(
    broker: BrokerProcess, raw: BrokerConnection, args: list[str], status: int, error: str
) -> None:
    failed = weir("quota", "alter", *args, "--bootstrap-server", broker.bootstrap)
    assert failed.returncode == status
    assert error in failed.stderr
    assert quotas(raw) == {}


# ---- enforcement -----------------------------------------------------------------------------


def test_request_percentage_throttles_only_the_client_over_it(
    broker: BrokerProcess, raw: BrokerConnection
) -> None:
    """A request_percentage of 0: any time spent on the client's requests is over it, and the
    throttle is at most one window (1 s), as Kafka bounds request-time throttles."""
    assert alter(raw, (("client-id", "greedy"),), request_percentage=0).error_code == 0
    with connect(broker, "greedy") as greedy:
        request = describe_v1.DescribeClientQuotasRequest(components=(), strict=False)
        answered = greedy.call(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, request)
    assert answered.error_code == ErrorCode.none
    assert answered.throttle_time == datetime.timedelta(seconds=1)
    assert describe(raw).throttle_time == datetime.timedelta(0)



class Throttles:
    """librdkafka's throttle_cb: the throttle times brokers reported."""

    def __init__(self) -> None:
        self.times_ms: list[int] = []

    def __call__(self, event: Any) -> None:
        self.times_ms.append(int(event.throttle_time * 1000))


def rate_over_quota_cycles(events: list[tuple[float, int]]) -> tuple[float, int]:
    """Bytes per second of `events` (time, bytes) over whole quota cycles, and how many.

    Kafka's rate lets a client that always has more to send take `quota.window.num - 1`
    windows' worth of its quota at once (a burst), whenever the sample holding its last burst
    has expired, and little until then: it moves in cycles of about 11 s. Its rate is taken from
    the first burst's start to the last one's."""
    starts = burst_starts(events)
    assert len(starts) >= 2, f"bursts began at {starts} only"
    first, last = starts[0], starts[-1]
    moved = sum(size for at, size in events if first <= at < last)
    return moved / (last - first), len(starts) - 1


def burst_starts(events: list[tuple[float, int]]) -> list[float]:
    """When each burst began: a run of events less than 0.1 s apart carrying at least three
    seconds' worth of the quota."""
    starts, run_start, run_bytes, previous = [], 0.0, 0, None
    for at, size in [*events, (float("inf"), 0)]:
        if previous is not None and at - previous >= 0.1:
            if run_bytes >= 3 * BOUND:
                starts.append(run_start)
            run_start, run_bytes = at, 0
        elif previous is None:
            run_start = at
        run_bytes += size
        previous = at
    return starts


def create_topic(broker: BrokerProcess, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(TIMEOUT)


def test_producer_byte_rate_holds_a_producer_to_its_rate(
    broker: BrokerProcess, raw: BrokerConnection, figure: Callable[..., None]
) -> None:
    create_topic(broker, "produced")
    assert alter(raw, (("client-id", "quota-producer"),), producer_byte_rate=BOUND).error_code == 0
    throttles, delivered, failures = Throttles(), [], []

    def on_delivery(error: KafkaError | None, message: Any) -> None:
        if error is not None:
            failures.append(error)
        else:
            delivered.append((time.monotonic(), len(message.value())))

    producer = Producer({
        "bootstrap.servers": broker.bootstrap, "client.id": "quota-producer", "linger.ms": 5,
        "batch.size": 16384, "queue.buffering.max.kbytes": 256, "throttle_cb": throttles,
    })  # fmt: skip
    value, sent = b"x" * 1000, 0
    started = time.monotonic()
    while time.monotonic() - started < RUN_S:
        try:
            producer.produce("produced", value, on_delivery=on_delivery)
            sent += 1
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(TIMEOUT) == 0
    rate, cycles = rate_over_quota_cycles(delivered)
    figure(f"producer rate held to producer_byte_rate=131072 over {cycles} cycles", rate, "B/s")
    assert rate == pytest.approx(BOUND, rel=0.2)
    assert throttles.times_ms and max(throttles.times_ms) > 0
    assert failures == [] and len(delivered) == sent
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "count"})
    assert consumer.get_watermark_offsets(_partition("produced"), TIMEOUT) == (0, sent)
    consumer.close()


def _partition(topic: str) -> Any:
    from confluent_kafka import TopicPartition

    return TopicPartition(topic, 0)


def test_consumer_byte_rate_holds_a_consumer_to_its_rate(
    broker: BrokerProcess, raw: BrokerConnection, figure: Callable[..., None]
) -> None:
    create_topic(broker, "consumed")
    # small batches: a fetch returns whole batches, and the quota lets through or throttles a
    # whole fetch, so batches much larger than a second's worth would make the rate coarse
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20,
                         "batch.size": 16384})  # fmt: skip
    count, value = 9000, b"y" * 1000
    for _ in range(count):
        producer.produce("consumed", value)
        producer.poll(0)
    assert producer.flush(TIMEOUT) == 0
    assert alter(raw, (("client-id", "quota-consumer"),), consumer_byte_rate=BOUND).error_code == 0
    throttles, received, offsets = Throttles(), [], []
    consumer = Consumer({
        "bootstrap.servers": broker.bootstrap, "client.id": "quota-consumer", "group.id": "q",
        "auto.offset.reset": "earliest", "throttle_cb": throttles,
        "fetch.max.bytes": 16384, "max.partition.fetch.bytes": 16384,
        "message.max.bytes": 16384, "queued.max.messages.kbytes": 64,
    })  # fmt: skip
    consumer.subscribe(["consumed"])
    started = time.monotonic()
    while time.monotonic() - started < RUN_S:
        message = consumer.poll(0.1)
        if message is not None and message.error() is None:
            received.append((time.monotonic(), len(message.value())))
            offsets.append(message.offset())
    rate, cycles = rate_over_quota_cycles(received)
    figure(f"consumer rate held to consumer_byte_rate=131072 over {cycles} cycles", rate, "B/s")
    assert rate == pytest.approx(BOUND, rel=0.2)
    assert throttles.times_ms and max(throttles.times_ms) > 0
    # with the quota removed the rest arrives at once; nothing was skipped or repeated
    assert alter(raw, (("client-id", "quota-consumer"),), consumer_byte_rate=None).error_code == 0
    while len(offsets) < count and (message := consumer.poll(TIMEOUT)) is not None:
        assert message.error() is None
        offsets.append(message.offset())
    consumer.close()
    assert offsets == list(range(count))


def test_a_user_quota_applies_to_the_authenticated_principal(broker_factory: Any) -> None:
    """A quota of user alice throttles alice's producer on a SASL listener and not bob's, whose
    client id is the same."""
    broker = broker_factory(
        "sasl",
        listeners="PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        **{"sasl.enabled.mechanisms": "PLAIN", "sasl.plain.users.alice": "alice-secret",
           "sasl.plain.users.bob": "bob-secret", "num.partitions": 1},
    )  # fmt: skip
    with connect(broker, "quota-admin") as raw:
        assert alter(raw, (("user", "alice"),), producer_byte_rate=1000).error_code == 0
    sasl = f"127.0.0.1:{broker.listeners['SASL_PLAINTEXT']}"

    def throttles_of(user: str) -> list[int]:
        throttles, reports = Throttles(), []
        producer = Producer({
            "bootstrap.servers": sasl, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": f"{user}-secret",
            "client.id": "shared", "linger.ms": 0, "throttle_cb": throttles,
        })  # fmt: skip
        for _ in range(12):  # 12 kB: over what 1000 B/s allows in the first windows
            producer.produce("by-user", b"x" * 1000, on_delivery=lambda e, _m: reports.append(e))
        assert producer.flush(TIMEOUT) == 0
        producer.poll(0.5)
        assert reports == [None] * 12
        return throttles.times_ms

    assert throttles_of("bob") == []
    assert max(throttles_of("alice")) > 0
