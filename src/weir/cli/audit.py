"""`weir audit who-reads|who-writes TOPIC`: the clients that fetched from or produced to a
topic, from the brokers' audit topic `__audit` (`audit.enable`, see `weir.broker.audit`).

Each client (principal, client id, address) with the record bytes and records the brokers
counted for it on the topic, over every partition and broker, and the first and last minute
counted; biggest first. `--since` and `--until` (an ISO time, or a duration back from now:
`90s`, `30m`, `2h`, `7d`) keep the minutes that overlap [since, until). `--json` prints the
same as one JSON document. What is counted: `weir.broker.audit`; counts reach `__audit` every
`audit.flush.interval.ms` (a minute by default), so the last minute may not be there yet.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
from typing import Any

from confluent_kafka import Consumer

from weir.cli.clients import add_bootstrap, add_client_settings, client_config, connected
from weir.cli.table import print_table
from weir.cluster.audit_log import AuditReadError, ClientTraffic, read_entries, who
from weir.protocol.audit_records import AUDIT_TOPIC, FETCH, PRODUCE

COLUMNS = ("PRINCIPAL", "CLIENT-ID", "ADDRESS", "BYTES", "RECORDS", "FIRST-MINUTE",
           "LAST-MINUTE")  # fmt: skip
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def register(commands: Any) -> None:
    audit = commands.add_parser("audit", help="who reads and who writes a topic (from __audit)")
    sub = audit.add_subparsers(dest="audit_command", required=True, metavar="ACTION")
    for name, api, text in (
        ("who-reads", FETCH, "the clients that fetched from TOPIC, by bytes"),
        ("who-writes", PRODUCE, "the clients that produced to TOPIC, by bytes"),
    ):
        command = sub.add_parser(name, help=text)
        command.add_argument("topic", metavar="TOPIC")
        command.add_argument(
            "--since",
            type=moment,
            metavar="TIME",
            help="ISO time (2026-05-01T08:00Z) or time ago (90m, 2h, 7d)",
        )
        command.add_argument("--until", type=moment, metavar="TIME", help="likewise; default now")
        command.add_argument("--json", action="store_true", help="print JSON instead of a table")
        add_bootstrap(command)
        add_client_settings(command)
        command.set_defaults(run=run_who, api=api)


def moment(text: str, now: datetime.datetime | None = None) -> int:
    """Milliseconds since the epoch of an ISO time (UTC unless it says) or of a duration
    before `now`."""
    duration = _DURATION.fullmatch(text.strip())
    if duration is not None:
        now = now or datetime.datetime.now(datetime.UTC)
        seconds = float(duration[1]) * _UNIT_S[duration[2]]
        return int((now.timestamp() - seconds) * 1000)
    try:
        parsed = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither an ISO time (2026-05-01T08:00Z) nor a duration (90m, 2h, 7d)"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.UTC)
    return int(parsed.timestamp() * 1000)


def run_who(args: argparse.Namespace) -> int:
    settings = {"group.id": "weir-audit", "enable.auto.commit": False,
                "allow.auto.create.topics": False}  # fmt: skip
    consumer = connected(Consumer, client_config(args, **settings))
    try:
        entries = read_entries(consumer, since_ms=args.since, until_ms=args.until)
    except AuditReadError as exc:
        print(f"weir: {exc}", file=sys.stderr)
        return 1
    finally:
        consumer.close()
    if not entries and not args.json:
        print(f"(nothing in {AUDIT_TOPIC} for these minutes: is audit.enable on, and has a "
              "minute been written yet?)", file=sys.stderr)  # fmt: skip
    clients = who(entries, args.topic, args.api)
    if args.json:
        print(json.dumps({"topic": args.topic, "api": args.api,
                          "clients": [_document(c) for c in clients]}, indent=2))  # fmt: skip
        return 0
    print_table(COLUMNS, [(c.principal, c.client_id or None, c.address or None, c.bytes,
                           c.records, _minute(c.first_minute_ms), _minute(c.last_minute_ms))
                          for c in clients])  # fmt: skip
    return 0


def _document(client: ClientTraffic) -> dict[str, Any]:
    return {
        "principal": client.principal,
        "client_id": client.client_id,
        "address": client.address,
        "bytes": client.bytes,
        "records": client.records,
        "first_minute": _minute(client.first_minute_ms),
        "last_minute": _minute(client.last_minute_ms),
    }


def _minute(milliseconds: int) -> str:
    moment = datetime.datetime.fromtimestamp(milliseconds / 1000, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%MZ")
