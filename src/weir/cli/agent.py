"""`weir agent start|send|status`: run the reliable log-shipping agent and talk to it.

`start --command-config FILE -X KEY=VALUE` add librdkafka settings (security ones: see
`weir.protocol.client_settings`) to the `[producer]` table of the agent's config file.
`start --tail GLOB:TOPIC` follows files (see `weir.agent.tail`), `--metrics-port N` serves
Prometheus metrics (see `weir.agent.metrics`).
`send` exits 0 only when the agent acknowledged every stdin line (stored durably per the topic's
class); lines the agent refused are counted per reason on stderr and exit 1; an agent that is not
running or does not answer within `--timeout` is one line on stderr and exit 2.
On SIGTERM `start` stops accepting, then flushes and closes the queues within the agent's
`shutdown_timeout_ms`; undelivered events are sent after the next start.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from weir.agent.client import DEFAULT_TIMEOUT_S, AgentClient, AgentClientError
from weir.agent.event import Event
from weir.agent.wire import DEFAULT_SOCKET
from weir.cli.clients import add_client_settings, security_settings
from weir.protocol.client_settings import client_settings


def register(commands: Any) -> None:
    from weir.cli.logformats import add_formats_option

    agent = commands.add_parser("agent", help="the reliable log-shipping agent")
    actions = agent.add_subparsers(dest="action", required=True, metavar="ACTION")
    start = actions.add_parser("start", help="run the agent in the foreground")
    start.add_argument("--config", type=Path, help="TOML settings (see weir.agent.config)")
    start.add_argument("--socket", type=Path, help="Unix socket path")
    start.add_argument("--spool", type=Path, help="directory of the durable queues")
    start.add_argument("--bootstrap-server", help="HOST:PORT of a broker")
    add_client_settings(start)
    start.add_argument("--tail", action="append", default=[], metavar="GLOB:TOPIC",
                       help="follow the files matching GLOB into TOPIC (repeatable)")  # fmt: skip
    start.add_argument("--delivery-guarantee", choices=["exactly-once", "at-least-once"],
                       help="override the config's delivery_guarantee")  # fmt: skip
    start.add_argument("--metrics-port", type=int, metavar="N",
                       help="serve Prometheus metrics on port N (0: any free port)")  # fmt: skip
    add_formats_option(start)  # format files besides the shipped ones, for the inputs' keys
    start.add_argument("--ready-file", type=Path, help=argparse.SUPPRESS)
    start.set_defaults(run=run_start)
    send = actions.add_parser("send", help="send stdin lines through the agent")
    send.add_argument("topic")
    send.add_argument("--socket", type=Path, default=Path(DEFAULT_SOCKET))
    send.add_argument("--key-separator", help="split each line into KEY SEP VALUE")
    send.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                      help="how long to wait for each answer of the agent")  # fmt: skip
    send.set_defaults(run=run_send)
    status = actions.add_parser("status", help="print the agent's queues as JSON")
    status.add_argument("--socket", type=Path, default=Path(DEFAULT_SOCKET))
    status.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS")
    status.set_defaults(run=run_status)


def run_start(args: argparse.Namespace) -> int:
    from weir.agent.agent import Agent
    from weir.agent.config import DeliveryGuarantee, load_config
    from weir.agent.input_formats import UnknownFormatKey, check_input_keys
    from weir.agent.server import AgentSocketServer
    from weir.agent.tail import parse_tail_flag

    try:
        config = load_config(args.config)
    except (OSError, ValueError) as exc:
        print(f"weir: {args.config}: {exc}", file=sys.stderr)
        return 2
    config = config.with_overrides(
        producer=client_settings(config.producer, security_settings(args)),
        socket=args.socket,
        spool=args.spool,
        bootstrap_server=args.bootstrap_server,
        metrics_port=args.metrics_port,
        delivery_guarantee=DeliveryGuarantee(args.delivery_guarantee)
        if args.delivery_guarantee
        else None,
        inputs=config.inputs + tuple(parse_tail_flag(t) for t in args.tail) or None,
        formats=config.formats + tuple(args.formats) or None,
    )
    try:
        check_input_keys(config.inputs, config.formats)
    except UnknownFormatKey as error:
        print(f"weir: {error}", file=sys.stderr)
        return 2
    agent = Agent(config)
    server = AgentSocketServer(config.socket, agent)
    server.serve_in_background()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if agent.metrics_server is not None:
        port = agent.metrics_server.server_port
        print(f"weir agent metrics on http://{config.metrics_host}:{port}/metrics", flush=True)
    print(f"weir agent ready on {config.socket}", flush=True)
    if args.ready_file:
        args.ready_file.write_text(str(config.socket))
    with contextlib.suppress(KeyboardInterrupt):
        stop.wait()
    server.shutdown()
    server.server_close()
    config.socket.unlink(missing_ok=True)
    agent.close()
    return 0


def _events(topic: str, separator: str | None) -> Iterator[Event]:
    for raw in sys.stdin.buffer:
        line = raw.rstrip(b"\n")
        key = None
        if separator is not None and separator.encode() in line:
            key, line = line.split(separator.encode(), 1)
        yield Event(topic=topic, value=line, key=key)


def run_send(args: argparse.Namespace) -> int:
    try:
        with AgentClient(args.socket, timeout_s=args.timeout) as client:
            responses = client.send_all(_events(args.topic, args.key_separator))
    except AgentClientError as exc:
        print(f"weir: {exc}", file=sys.stderr)
        return 2
    refused = Counter(r.code for r in responses if not r.ok)
    for code, count in refused.items():
        example = next(r for r in responses if r.code == code)
        print(f"weir: {count} of {len(responses)} lines refused: {code}: "
              f"{example.message.decode(errors='replace')}", file=sys.stderr)  # fmt: skip
    return 1 if refused else 0


def run_status(args: argparse.Namespace) -> int:
    try:
        with AgentClient(args.socket, timeout_s=args.timeout) as client:
            print(json.dumps(client.status(), indent=2))
    except AgentClientError as exc:
        print(f"weir: {exc}", file=sys.stderr)
        return 2
    return 0
