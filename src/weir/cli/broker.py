"""`weir broker start`: run a broker in the foreground: a single node with embedded metadata, or
a member of a ZooKeeper cluster (`--zookeeper`).

`weir broker alter|describe`: dynamic broker configs, as `kafka-configs.sh --entity-type brokers`
changes them: `--entity-name N` for one broker, `--entity-default` for the cluster default,
`--add-config k1=v1,k2=[a,b]` and `--delete-config k1,k2`."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from kio.schema.describe_configs.v1 import request as describe_v1
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as alter_v1
from kio.static.primitive import i8

from weir.broker.config import BrokerConfig, parse_host_port
from weir.cli.broker_socket import BrokerConnection, BrokerConnectionError
from weir.cli.clients import (
    ADMIN_TIMEOUT,
    add_bootstrap,
    add_client_settings,
    admin_client,
    security_settings,
)
from weir.cli.kafka_errors import error_line, kafka_error
from weir.protocol.apis import ApiKey
from weir.protocol.client_settings import ClientSecurity

#: one config's change: (name, value, IncrementalAlterConfigs operation)
Change = tuple[str, str | None, int]
BROKER = 4  # a config resource's type
SET, DELETE = 0, 1  # IncrementalAlterConfigs operations
DEFAULT_CONFIG = 5
#: DescribeConfigs' config sources, by Kafka's names
SOURCES = {
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
}


def register(commands: Any) -> None:
    parser = commands.add_parser("broker", help="run a broker")
    sub = parser.add_subparsers(dest="broker_command", required=True, metavar="ACTION")
    start = sub.add_parser("start", help="start a broker in the foreground")
    start.add_argument("--config", type=Path, help="TOML file of Kafka-style broker settings")
    start.add_argument("--data-dir", type=Path, help="log directory (default ./weir-data)")
    start.add_argument("--listen", help="HOST:PORT to listen on (default 127.0.0.1:9092)")
    start.add_argument("--advertise", help="HOST:PORT clients should connect to")
    start.add_argument("--node-id", type=int)
    start.add_argument("--rack")
    start.add_argument("--zookeeper", help="HOST:PORT[/chroot] (cluster mode)")
    start.add_argument("--ready-file", type=Path, help="write HOST:PORT here once ready")
    start.add_argument("--metrics-port", type=int, metavar="P",
                       help="serve Prometheus metrics on P (metrics.port; 0: none)")  # fmt: skip
    start.set_defaults(run=run_start)
    for action, run in (("alter", run_alter), ("describe", run_describe)):
        command = sub.add_parser(action, help=f"{action} dynamic broker configs")
        entity = command.add_mutually_exclusive_group(required=True)
        entity.add_argument("--entity-name", help="the broker's node id")
        entity.add_argument("--entity-default", action="store_true", help="the cluster default")
        add_bootstrap(command)
        add_client_settings(command)
        command.set_defaults(run=run)
    alter = sub.choices["alter"]
    alter.add_argument("--add-config", action="append", default=[], metavar="K=V[,K=V]")
    alter.add_argument("--delete-config", action="append", default=[], metavar="K[,K]")


def run_alter(args: argparse.Namespace) -> int:
    sets = [pair for item in args.add_config for pair in split_config_pairs(item)]
    deletes = [k.strip() for item in args.delete_config for k in item.split(",") if k.strip()]
    changes: list[Change] = [(k, v, SET) for k, v in sets]
    changes += [(k, None, DELETE) for k in deletes]
    alter = _alter_default if args.entity_default else _alter_broker
    failure = alter(args, changes)
    if failure is not None:
        print(f"weir: {failure}", file=sys.stderr)
        return 1
    what = "the cluster default" if args.entity_default else f"broker {args.entity_name}"
    print(f"altered the dynamic configs of {what}")
    return 0


def run_describe(args: argparse.Namespace) -> int:
    """Each config set dynamically or in the broker's file, one `name=value (SOURCE)` a line."""
    request = describe_v1.DescribeConfigsRequest(
        resources=(describe_v1.DescribeConfigsResource(
            resource_type=i8(BROKER), resource_name=_entity(args), configuration_keys=None),),
        include_synonyms=False,
    )  # fmt: skip
    response = _call(args, ApiKey.DESCRIBE_CONFIGS, 1, request)
    [result] = response.results
    if result.error_code != ErrorCode.none:
        print(f"weir: {result.error_code.name.upper()}: {result.error_message}", file=sys.stderr)
        return 1
    for entry in sorted(result.configs, key=lambda c: c.name):
        if entry.config_source != DEFAULT_CONFIG:
            print(f"{entry.name}={entry.value} ({SOURCES.get(entry.config_source, '?')})")
    return 0


def _entity(args: argparse.Namespace) -> str:
    return "" if args.entity_default else str(args.entity_name)


def _alter_broker(args: argparse.Namespace, changes: list[Change]) -> Any:
    """Through librdkafka, which sends a broker's change to that broker."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    operations = {SET: AlterConfigOpType.SET, DELETE: AlterConfigOpType.DELETE}
    entries = [ConfigEntry(k, v, incremental_operation=operations[op]) for k, v, op in changes]
    resource = ConfigResource("broker", args.entity_name, incremental_configs=entries)
    admin = admin_client(args)  # held: the client stops once nothing refers to it
    try:
        admin.incremental_alter_configs([resource])[resource].result()
    except KafkaException as exc:
        error = kafka_error(exc)
        return error_line(error) if error is not None else exc
    return None


def _alter_default(args: argparse.Namespace, changes: list[Change]) -> Any:
    """Straight to the bootstrap broker: librdkafka has no resource with an empty name."""
    request = alter_v1.IncrementalAlterConfigsRequest(
        resources=(alter_v1.AlterConfigsResource(
            resource_type=i8(BROKER), resource_name="",
            configs=tuple(alter_v1.AlterableConfig(name=k, config_operation=i8(op), value=v)
                          for k, v, op in changes)),),
        validate_only=False,
    )  # fmt: skip
    [result] = _call(args, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, request).responses
    if result.error_code != ErrorCode.none:
        return f"{result.error_code.name.upper()}: {result.error_message}"
    return None


def _call(args: argparse.Namespace, api_key: int, version: int, request: Any) -> Any:
    host, port = parse_host_port(args.bootstrap_server)
    security = ClientSecurity.of(security_settings(args))
    try:
        with BrokerConnection(host, port, security, timeout=ADMIN_TIMEOUT,
                              client_id="weir-broker-configs") as connection:  # fmt: skip
            return connection.call(api_key, version, request)
    except BrokerConnectionError as exc:
        raise SystemExit(f"weir: {exc}") from None


def split_config_pairs(text: str) -> list[tuple[str, str]]:
    """`k1=v1,k2=[a,b]` (kafka-configs.sh's --add-config) -> [(k1, v1), (k2, "a,b")]."""
    pairs, depth, item = [], 0, ""
    for char in text + ",":
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            if item.strip():
                key, sep, value = item.partition("=")
                if not sep:
                    raise SystemExit(f"weir: expected KEY=VALUE, got {item.strip()!r}")
                pairs.append((key.strip(), value.strip().removeprefix("[").removesuffix("]")))
            item = ""
        else:
            item += char
    return pairs


def run_start(args: argparse.Namespace) -> int:
    overrides: dict[str, Any] = {
        "data_dir": args.data_dir,
        "node_id": args.node_id,
        "rack": args.rack,
        "zookeeper": args.zookeeper,
        "metrics_port": args.metrics_port,
    }
    if args.listen:
        overrides["listen_host"], overrides["listen_port"] = parse_host_port(args.listen)
    if args.advertise:
        overrides["advertised_host"], overrides["advertised_port"] = parse_host_port(args.advertise)
    try:
        config = BrokerConfig.load(args.config, **overrides)
    except ValueError as exc:  # a setting that cannot be used
        print(f"weir: {exc}", file=sys.stderr)
        return 2
    if not args.verbose:  # state changes are logged at INFO, as Kafka's brokers show them
        logging.getLogger().setLevel(logging.INFO)
    from weir.broker.security.errors import SecurityConfigError
    from weir.broker.server import run
    from weir.cluster.metadata import MetadataError

    try:
        return run(config, ready_file=args.ready_file)
    except (MetadataError, SecurityConfigError) as exc:  # ZooKeeper unreachable, no TLS key
        print(f"weir: {exc}", file=sys.stderr)
        return 1
