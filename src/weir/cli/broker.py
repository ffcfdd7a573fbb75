"""`weir broker start`: run a broker in the foreground: a single node with embedded metadata, or
a member of a ZooKeeper cluster (`--zookeeper`)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from weir.broker.config import BrokerConfig, parse_host_port


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
    start.set_defaults(run=run_start)


def run_start(args: argparse.Namespace) -> int:
    overrides: dict[str, Any] = {
        "data_dir": args.data_dir,
        "node_id": args.node_id,
        "rack": args.rack,
        "zookeeper": args.zookeeper,
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
