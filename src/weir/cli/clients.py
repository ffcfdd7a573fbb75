"""Console clients on confluent-kafka: `weir topic ...`, `weir produce`, `weir consume`.

They speak only the Kafka protocol, so they work against any Kafka-compatible cluster.
Every command takes `--bootstrap-server HOST:PORT` (default: $WEIR_BOOTSTRAP or localhost:9092)
and librdkafka's client settings, security ones included (`security.protocol`,
`sasl.mechanism`, `sasl.username`, `ssl.ca.location`, ...): from a properties file
(`--command-config FILE`, as kafka-*.sh take it) and `-X KEY=VALUE` (as kcat takes them; these
win), read as every weir client reads them (`weir.protocol.client_settings`: a Java client's
`sasl.jaas.config` too). `connected` gives a client that has reached the cluster, or fails at
once with the broker's reason when it refuses the TLS handshake or the credentials, and within
a second or so, naming the addresses, when nothing listens at any bootstrap server.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
)
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from weir.cli.broker_socket import nothing_listens
from weir.cli.kafka_errors import error_line, fail, kafka_error, librdkafka_logger
from weir.protocol.client_settings import (
    ClientSettingsError,
    client_settings,
    parse_pairs,
    parse_properties,
)

DEFAULT_BOOTSTRAP = "localhost:9092"
ADMIN_TIMEOUT = 30
CONNECT_POLL_S = 0.5
#: how long a topic may stay unknown before produce and consume give up on it
TOPIC_PROPAGATION_S = 2
#: errors that retrying will not mend: the broker refused the TLS handshake or the credentials
_REFUSALS = frozenset(
    {KafkaError._AUTHENTICATION, KafkaError._SSL, KafkaError.SASL_AUTHENTICATION_FAILED}
)
#: a topic's errors that may pass: it is being created, or its leader elected
_NOT_YET = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.LEADER_NOT_AVAILABLE})
_Client = TypeVar("_Client", AdminClient, Consumer, Producer)


def add_bootstrap(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-server",
        default=os.environ.get("WEIR_BOOTSTRAP", DEFAULT_BOOTSTRAP),
        help="HOST:PORT of a broker (default: $WEIR_BOOTSTRAP or localhost:9092)",
    )


def add_client_settings(parser: argparse.ArgumentParser) -> None:
    """--command-config and -X, for commands whose clients are built with `client_config`."""
    parser.add_argument(
        "--command-config",
        type=Path,
        metavar="FILE",
        help="client settings, KEY=VALUE per line (security.protocol, sasl.*, ssl.*, ...)",
    )
    parser.add_argument(
        "-X",
        dest="client_settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a librdkafka client setting (repeatable; wins over --command-config)",
    )


def read_properties(path: Path) -> dict[str, str]:
    """A Java-style properties file (see `weir.protocol.client_settings.parse_properties`)."""
    try:
        return parse_properties(path.read_text(encoding="utf-8"), str(path))
    except OSError as exc:
        raise SystemExit(f"weir: {path}: {exc.strerror or exc}") from None
    except ClientSettingsError as exc:
        raise SystemExit(f"weir: {exc}") from None


def security_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The client settings of --command-config and -X (these win), librdkafka's names."""
    from_file: dict[str, str] = {}
    if getattr(args, "command_config", None) is not None:
        from_file = read_properties(args.command_config)
    try:
        return client_settings(from_file, parse_pairs(getattr(args, "client_settings", [])))
    except ClientSettingsError as exc:
        raise SystemExit(f"weir: {exc}") from None


def register(commands: Any) -> None:
    _register_topic(commands)
    produce = commands.add_parser("produce", help="send stdin lines to a topic")
    add_bootstrap(produce)
    add_client_settings(produce)
    produce.add_argument("topic")
    produce.add_argument("--key-separator", help="split each line into KEY SEP VALUE")
    produce.add_argument("--partition", type=int, help="send everything to this partition")
    produce.add_argument("--header", action="append", default=[], metavar="KEY=VALUE")
    produce.add_argument(
        "--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"]
    )
    produce.add_argument("--acks", default="all", choices=["0", "1", "all", "-1"])
    produce.set_defaults(run=run_produce)
    consume = commands.add_parser("consume", help="print a topic's records")
    add_bootstrap(consume)
    add_client_settings(consume)
    consume.add_argument("topic")
    consume.add_argument("--group", help="join this consumer group (commits offsets)")
    consume.add_argument("--from-beginning", action="store_true")
    consume.add_argument("--max-messages", type=int)
    consume.add_argument("--partition", type=int, action="append", help="only these partitions")
    consume.add_argument(
        "--exit-at-end",
        "-e",
        action="store_true",
        help="stop once every partition has been read to its end",
    )
    consume.add_argument("--print-key", action="store_true")
    consume.add_argument("--key-separator", default="\t")
    consume.set_defaults(run=run_consume)


def _register_topic(commands: Any) -> None:
    topic = commands.add_parser("topic", help="create, list, describe, alter, delete topics")
    sub = topic.add_subparsers(dest="topic_command", required=True, metavar="ACTION")
    create = sub.add_parser("create", help="create a topic (partitions, replicas, configs)")
    create.add_argument("name")
    create.add_argument("--partitions", type=int, default=-1)
    create.add_argument("--replication-factor", type=int, default=-1)
    create.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    create.add_argument(
        "--placement",
        choices=["kafka", "consistent-hash"],
        help="replica placement strategy (the topic config replica.placement.strategy)",
    )
    create.add_argument(
        "--replica-assignment",
        metavar="B:B,B:B",
        help="explicit replicas as kafka-topics.sh takes them: partitions separated by commas, "
        "each partition's broker ids by colons (leader first)",
    )
    create.set_defaults(run=run_topic_create)
    listing = sub.add_parser("list", help="list the names of the topics")
    listing.set_defaults(run=run_topic_list)
    describe = sub.add_parser(
        "describe", help="partitions' leader, replicas and ISR; config overrides"
    )
    describe.add_argument("name", nargs="?", help="one topic (default: every topic)")
    describe.add_argument(
        "--under-replicated-partitions",
        action="store_true",
        help="only partitions whose ISR is smaller than their replica list",
    )
    describe.set_defaults(run=run_topic_describe)
    delete = sub.add_parser("delete", help="delete a topic")
    delete.add_argument("name")
    delete.set_defaults(run=run_topic_delete)
    alter = sub.add_parser("alter", help="add partitions; set or delete config overrides")
    alter.add_argument("name")
    alter.add_argument("--partitions", type=int, help="grow to this many partitions")
    alter.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    alter.add_argument("--delete-config", action="append", default=[], metavar="KEY")
    alter.set_defaults(run=run_topic_alter)
    for parser in (create, listing, describe, delete, alter):
        add_bootstrap(parser)
        add_client_settings(parser)


def _pairs(items: list[str]) -> dict[str, str]:
    try:
        return parse_pairs(items)
    except ClientSettingsError as exc:
        raise SystemExit(f"weir: {exc}") from None


def client_config(args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    """Common settings: librdkafka's own logging off (errors are reported by the command),
    then the command's, then the user's client settings (--command-config, -X)."""
    return {
        "bootstrap.servers": args.bootstrap_server,
        "log_level": 0,
        "logger": librdkafka_logger(),
        **extra,
        **security_settings(args),
    }


def admin_client(args: argparse.Namespace) -> AdminClient:
    """An admin client that has reached the cluster (see `connected`). Its metadata requests
    never create the topics they name."""
    return connected(AdminClient, client_config(args, **{"allow.auto.create.topics": False}))


def connected(make: Callable[[dict[str, Any]], _Client], config: dict[str, Any]) -> _Client:
    """A client made with `config` once it has answers from the cluster. A refused TLS
    handshake or SASL authentication raises KafkaException with the broker's reason at once,
    where librdkafka itself would retry until the command's request timed out. So does a
    cluster where nothing listens (BrokerConnectionError naming each address): librdkafka says
    when every broker is down (_ALL_BROKERS_DOWN), and `nothing_listens` tells a refused
    connection (fail now) from a broker merely slow to answer (keep waiting)."""
    refusals: list[KafkaError] = []
    all_down: list[KafkaError] = []

    def on_error(error: KafkaError) -> None:
        if error.code() in _REFUSALS:
            refusals.append(error)
        elif error.code() == KafkaError._ALL_BROKERS_DOWN:
            all_down.append(error)

    client = make({**config, "error_cb": on_error})
    deadline = time.monotonic() + ADMIN_TIMEOUT
    while True:
        try:
            client.list_topics(timeout=CONNECT_POLL_S)
            return client
        except KafkaException:
            if time.monotonic() > deadline:
                raise
        client.poll(0)  # serves error_cb
        if refusals:
            raise KafkaException(refusals[0])
        if all_down:
            all_down.clear()
            unreachable = nothing_listens(str(config.get("bootstrap.servers", "")))
            if unreachable is not None:
                raise unreachable


def run_topic_create(args: argparse.Namespace) -> int:
    config = _pairs(args.config)
    if args.placement:
        config["replica.placement.strategy"] = args.placement
    if args.replica_assignment:
        try:
            assignment = [
                [int(b) for b in part.split(":")] for part in args.replica_assignment.split(",")
            ]
        except ValueError:
            print(f"weir: bad --replica-assignment {args.replica_assignment!r}", file=sys.stderr)
            return 2
        # confluent-kafka wants the partition count given along with the assignment
        topic = NewTopic(
            args.name, num_partitions=len(assignment), replica_assignment=assignment, config=config
        )
    else:
        topic = NewTopic(
            args.name,
            num_partitions=args.partitions,
            replication_factor=args.replication_factor,
            config=config,
        )
    admin = admin_client(args)
    try:
        admin.create_topics([topic], request_timeout=ADMIN_TIMEOUT)[args.name].result()
    except KafkaException as exc:
        return fail(exc)
    print(f"created topic {args.name}")
    return 0


def run_topic_list(args: argparse.Namespace) -> int:
    metadata = admin_client(args).list_topics(timeout=ADMIN_TIMEOUT)
    for name in sorted(metadata.topics):
        print(name)
    return 0


def run_topic_describe(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    if args.name is None:
        topics = admin.list_topics(timeout=ADMIN_TIMEOUT).topics
    else:
        metadata = admin.list_topics(args.name, timeout=ADMIN_TIMEOUT).topics.get(args.name)
        if metadata is None or metadata.error is not None:
            _topic_missing(args.name, metadata)
            return 1
        topics = {args.name: metadata}
    for name in sorted(topics):
        metadata = topics[name]
        partitions = sorted(metadata.partitions.items())
        if args.under_replicated_partitions:
            partitions = [(i, p) for i, p in partitions if len(p.isrs) < len(p.replicas)]
            if not partitions:
                continue
        else:
            resource = ConfigResource("topic", name)
            try:
                configs = admin.describe_configs([resource])[resource].result()
            except KafkaException as exc:
                return fail(exc)
            overrides = {k: v.value for k, v in sorted(configs.items()) if not v.is_default}
            print(
                f"Topic: {name}\tPartitions: {len(metadata.partitions)}\tConfigs: "
                + ",".join(f"{k}={v}" for k, v in overrides.items())
            )
        for index, partition in partitions:
            print(
                f"\tTopic: {name}\tPartition: {index}\tLeader: {partition.leader}\tReplicas: "
                f"{','.join(map(str, partition.replicas))}\t"
                f"Isr: {','.join(map(str, partition.isrs))}"
            )
    return 0


def _topic_metadata(client: Producer | Consumer, topic: str) -> Any:
    """The topic's metadata, or None once it has been reported missing or refused: at once
    when the client may not describe it, after TOPIC_PROPAGATION_S when it stays unknown (a
    topic just created may not have reached the broker asked yet). librdkafka alone would
    hold the records for topic.metadata.propagation.max.ms, or wait for ever to consume."""
    deadline = time.monotonic() + TOPIC_PROPAGATION_S
    late = False
    while True:
        metadata = client.list_topics(topic, timeout=ADMIN_TIMEOUT).topics.get(topic)
        error = metadata.error if metadata is not None else None
        if error is None or (error.code() == KafkaError.LEADER_NOT_AVAILABLE and late):
            return metadata  # a leader being elected: librdkafka waits for it
        if error.code() not in _NOT_YET or late:
            _topic_missing(topic, metadata)
            return None
        time.sleep(CONNECT_POLL_S)
        late = time.monotonic() > deadline


def _topic_missing(name: str, metadata: Any) -> None:
    """Report a topic the cluster did not describe: its error (UNKNOWN_TOPIC_OR_PARTITION,
    TOPIC_AUTHORIZATION_FAILED) in one line."""
    error = metadata.error if metadata is not None else None
    reason = error_line(error) if error is not None else "UNKNOWN_TOPIC_OR_PARTITION"
    print(f"weir: {reason} (topic {name!r})", file=sys.stderr)


def run_topic_delete(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    try:
        admin.delete_topics([args.name], request_timeout=ADMIN_TIMEOUT)[args.name].result()
    except KafkaException as exc:
        return fail(exc)
    print(f"deleted topic {args.name}")
    return 0


def run_topic_alter(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    try:
        if args.partitions is not None:
            admin.create_partitions([NewPartitions(args.name, args.partitions)])[args.name].result()
        entries = [
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in _pairs(args.config).items()
        ]
        entries += [
            ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
            for k in args.delete_config
        ]
        if entries:
            resource = ConfigResource("topic", args.name, incremental_configs=entries)
            admin.incremental_alter_configs([resource])[resource].result()
    except KafkaException as exc:
        return fail(exc)
    print(f"altered topic {args.name}")
    return 0


def run_produce(args: argparse.Namespace) -> int:
    """Send stdin's lines. A record the cluster refuses, or a fatal producer error (an
    idempotent producer without IdempotentWrite), ends it with one line naming Kafka's error."""
    producer = connected(Producer, client_config(
        args, acks=args.acks, **{"compression.type": args.compression,
                                 "enable.idempotence": args.acks in ("all", "-1"),
                                 "linger.ms": 5},
    ))  # fmt: skip
    if _topic_metadata(producer, args.topic) is None:
        return 1
    failures: list[KafkaError] = []

    def delivered(error: KafkaError | None, _message: Any) -> None:
        if error is not None:
            failures.append(error)

    try:
        sent = _send_lines(producer, args, delivered)
        remaining = producer.flush(ADMIN_TIMEOUT)
    except (KafkaException, SystemError) as exc:
        error = kafka_error(exc)
        if error is None:
            raise
        return fail(_fatal_error(producer) if error.code() == KafkaError._FATAL else exc)
    if failures or remaining:
        reason = error_line(failures[0]) if failures else "not delivered in time"
        print(
            f"weir: {reason} ({len(failures) + remaining} of {sent} records not delivered)",
            file=sys.stderr,
        )
        return 1
    return 0


def _fatal_error(producer: Producer) -> BaseException:
    """The fatal error that stopped the producer, as serving its events raises it (produce
    itself only says _FATAL)."""
    try:
        producer.poll(0)
    except (KafkaException, SystemError) as exc:
        return exc
    return KafkaException(KafkaError(KafkaError._FATAL))


def _send_lines(
    producer: Producer, args: argparse.Namespace, delivered: Callable[..., None]
) -> int:
    """Produce each stdin line as a record; how many were sent."""
    headers = list(_pairs(args.header).items())
    stdin: BinaryIO = sys.stdin.buffer
    sent = 0
    for line in stdin:
        key, value = _split(line.rstrip(b"\n"), args.key_separator)
        options: dict[str, Any] = {"key": key, "value": value, "on_delivery": delivered}
        if headers:
            options["headers"] = headers
        if args.partition is not None:
            options["partition"] = args.partition
        _produce(producer, args.topic, options)
        sent += 1
    return sent


def _produce(producer: Producer, topic: str, options: dict[str, Any]) -> None:
    while True:
        try:
            producer.produce(topic, **options)
            return
        except BufferError:
            producer.poll(0.1)


def _split(line: bytes, separator: str | None) -> tuple[bytes | None, bytes]:
    if separator is None:
        return None, line
    key, sep, value = line.partition(separator.encode())
    return (key, value) if sep else (None, line)


def run_consume(args: argparse.Namespace) -> int:
    settings: dict[str, Any] = {
        "group.id": args.group or "weir-console",
        "enable.auto.commit": bool(args.group),
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest" if args.from_beginning else "latest",
    }
    consumer = connected(Consumer, client_config(args, **settings))
    metadata = _topic_metadata(consumer, args.topic)
    if metadata is None:
        consumer.close()
        return 1
    partitions = args.partition or sorted(metadata.partitions)
    if args.group:
        consumer.subscribe([args.topic])
    else:
        start = OFFSET_BEGINNING if args.from_beginning else OFFSET_END
        consumer.assign([KafkaTopicPartition(args.topic, p, start) for p in partitions])
    try:
        return _print_records(consumer, args, set(partitions))
    except KeyboardInterrupt:
        return 0
    finally:
        consumer.close()


def _print_records(consumer: Consumer, args: argparse.Namespace, partitions: set[int]) -> int:
    out = sys.stdout.buffer
    printed = 0
    at_end: set[int] = set()
    while args.max_messages is None or printed < args.max_messages:
        message = consumer.poll(1.0)
        if message is None:
            continue
        error = message.error()
        if error is not None:
            if error.code() == -191:  # _PARTITION_EOF
                at_end.add(message.partition() or 0)
                if args.exit_at_end and at_end >= partitions:
                    break
                continue
            print(f"weir: {error_line(error)}", file=sys.stderr)
            return 1
        at_end.discard(message.partition() or 0)
        if args.print_key:
            out.write((message.key() or b"") + args.key_separator.encode())
        out.write((message.value() or b"") + b"\n")
        out.flush()
        printed += 1
    return 0
