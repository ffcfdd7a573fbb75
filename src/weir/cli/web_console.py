"""`weir console`: serve the web console (`weir.ops.console`) for the cluster at
`--bootstrap-server`, with the client settings every weir command takes (`--command-config`,
`-X`: TLS and SASL included). It prints one line, `weir console on http://HOST:PORT`, once it
accepts requests, and serves until interrupted (Ctrl-C or SIGTERM)."""

from __future__ import annotations

import argparse
import signal
from typing import Any

from weir.cli.clients import add_bootstrap, add_client_settings, client_config, security_settings
from weir.ops.console.history import DEFAULT_LIMIT
from weir.ops.console.reader import ClientSettings
from weir.ops.console.sampler import DEFAULT_INTERVAL_S
from weir.ops.console.server import Options, run
from weir.protocol.client_settings import ClientSecurity, ClientSettingsError


def register(commands: Any) -> None:
    console = commands.add_parser(
        "console", help="the web console: cluster, topics, groups, messages, audit"
    )
    add_bootstrap(console)
    add_client_settings(console)
    console.add_argument("--host", default="127.0.0.1",
                         help="the address to listen on (default 127.0.0.1)")  # fmt: skip
    console.add_argument("--port", type=int, default=9021,
                         help="the port to listen on (default 9021; 0: any free port)")  # fmt: skip
    console.add_argument("--sample-interval", type=float, default=DEFAULT_INTERVAL_S,
                         metavar="SECONDS", help="between two samples of offsets for the charts "
                         f"and lag statuses (default {DEFAULT_INTERVAL_S:g})")  # fmt: skip
    console.add_argument("--history", type=int, default=DEFAULT_LIMIT, metavar="SAMPLES",
                         help=f"samples kept in memory (default {DEFAULT_LIMIT})")  # fmt: skip
    console.add_argument("--refresh", type=float, default=10.0, metavar="SECONDS",
                         help="live pages reload this often (default 10; 0: never)")  # fmt: skip
    console.set_defaults(run=run_console)


def run_console(args: argparse.Namespace) -> int:
    if args.sample_interval <= 0 or args.history < 2 or args.refresh < 0:
        raise SystemExit("weir: --sample-interval must be above 0, --history at least 2 and "
                         "--refresh not negative")  # fmt: skip
    try:
        security = ClientSecurity.of(security_settings(args))
    except ClientSettingsError as exc:
        raise SystemExit(f"weir: {exc}") from None
    settings = ClientSettings(args.bootstrap_server, client_config(args), security)
    options = Options(args.host, args.port, args.sample_interval, args.history, args.refresh)
    signal.signal(signal.SIGTERM, _stop)
    try:
        run(settings, options, lambda url: print(f"weir console on {url}", flush=True))
    except OSError as exc:  # the port is taken, or the address is not this machine's
        reason = exc.strerror or exc
        raise SystemExit(f"weir: cannot listen on {args.host}:{args.port}: {reason}") from None
    except KeyboardInterrupt:
        pass
    return 0


def _stop(_signal: int, _frame: object) -> None:
    raise KeyboardInterrupt
