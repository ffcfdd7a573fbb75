"""The `weir` command: one sub-command module per noun, dispatched by argparse."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from confluent_kafka import KafkaException

from weir import __version__
from weir.cli import (
    acl,
    agent,
    audit,
    broker,
    clients,
    cluster,
    consumer,
    demo,
    groups,
    kafka_errors,
    logdirs,
    logformats,
    logtool,
    operator,
    pipeline,
    quota,
    reassign,
    txn,
    user,
    web_console,
    zookeeper,
)
from weir.cli.broker_socket import BrokerConnectionError

#: the exit status when the output meets a closed pipe: what a shell reports for a command that
#: SIGPIPE ended (128 + 13), as for `cat` or `grep` in `... | head -1`, so `set -o pipefail`
#: treats weir like them
CLOSED_PIPE_STATUS = 128 + 13


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="weir", description="Kafka-compatible log streaming")
    parser.add_argument("--version", action="version", version=f"weir {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    broker.register(commands)
    clients.register(commands)
    groups.register(commands)
    audit.register(commands)
    txn.register(commands)
    user.register(commands)
    acl.register(commands)
    quota.register(commands)
    consumer.register(commands)
    demo.register(commands)
    logtool.register(commands)
    logdirs.register(commands)
    logformats.register(commands)
    agent.register(commands)
    pipeline.register(commands)
    zookeeper.register(commands)
    cluster.register(commands)
    reassign.register(commands)
    operator.register(commands)
    web_console.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        try:
            return _run(argv)
        finally:
            sys.stdout.flush()  # output still buffered meets a closed pipe here
    except BrokenPipeError:
        return _stdout_closed()


def _run(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        result: int = args.run(args)
    except KeyboardInterrupt:
        return 130
    except BrokerConnectionError as exc:
        print(f"weir: {exc}", file=sys.stderr)
        return 1
    except KafkaException as exc:
        return kafka_errors.fail(exc)
    except SystemError as exc:  # confluent-kafka's form of a fatal error (see kafka_errors)
        if kafka_errors.kafka_error(exc) is None:
            raise
        return kafka_errors.fail(exc)
    return result


def _stdout_closed() -> int:
    """The reader of our output has gone (`weir topic describe | head -1`): stop without a
    traceback. stdout is pointed at /dev/null, since the interpreter flushes it again on its
    way out."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return CLOSED_PIPE_STATUS


if __name__ == "__main__":
    sys.exit(main())
