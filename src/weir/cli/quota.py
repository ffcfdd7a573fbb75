"""`weir quota describe|alter`: client quotas, as `kafka-configs.sh --entity-type users|clients`
shows and changes them, through DescribeClientQuotas and AlterClientQuotas.

An entity is one `--entity-type` (users, clients) with its `--entity-name N` or
`--entity-default`, or both types for a user's client id (`--entity-type users --entity-name
alice --entity-type clients --entity-name app1`), names taken in the order the types are given.
`alter` takes `--add-config producer_byte_rate=1024,consumer_byte_rate=2048` and
`--delete-config k1,k2`; `describe` without a name lists every entity of the type(s) given.
Output is kafka-configs.sh's: "Quota configs for user-principal 'alice' are
producer_byte_rate=1024.0" and "Completed updating config for user alice."
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kio.schema.alter_client_quotas.v1 import request as alter_v1
from kio.schema.describe_client_quotas.v1 import request as describe_v1
from kio.schema.errors import ErrorCode
from kio.static.primitive import f64, i8

from weir.broker.config import parse_host_port
from weir.cli.broker import split_config_pairs
from weir.cli.broker_socket import BrokerConnection, BrokerConnectionError
from weir.cli.clients import ADMIN_TIMEOUT, add_bootstrap, add_client_settings, security_settings
from weir.protocol.apis import ApiKey
from weir.protocol.client_settings import ClientSecurity

#: kafka-configs.sh's entity types -> ClientQuotaEntity's
ENTITY_TYPES = {"users": "user", "clients": "client-id"}
#: how kafka-configs.sh names each entity type in its output
_DESCRIBED_AS = {"user": "user-principal", "client-id": "client-id"}
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
#: an entity part as given: (entity type, name; "" for --entity-default, None for none given)
Part = tuple[str, str | None]


def register(commands: Any) -> None:
    parser = commands.add_parser("quota", help="describe and alter client quotas")
    sub = parser.add_subparsers(dest="quota_command", required=True, metavar="ACTION")
    for action, run in (("describe", run_describe), ("alter", run_alter)):
        command = sub.add_parser(action, help=f"{action} client quotas")
        command.add_argument(
            "--entity-type", action="append", required=True, choices=sorted(ENTITY_TYPES),
            help="users or clients; give both (each with its name) for a user's client id",
        )  # fmt: skip
        command.add_argument("--entity-name", dest="entity_names", action="append", default=[],
                             help="the user or client id, for the --entity-type before it")
        command.add_argument(
            "--entity-default", dest="entity_names", action="append_const", const="",
            help="the default user or client id, for the --entity-type before it",
        )  # fmt: skip
        add_bootstrap(command)
        add_client_settings(command)
        command.set_defaults(run=run)
    alter = sub.choices["alter"]
    alter.add_argument("--add-config", action="append", default=[], metavar="K=V[,K=V]")
    alter.add_argument("--delete-config", action="append", default=[], metavar="K[,K]")


def entity_parts(types: list[str], names: list[str]) -> list[Part]:
    """Pair each --entity-type with its name in order (None where no name is left)."""
    if len(names) > len(types):
        raise SystemExit("weir: more entity names given than entity types")
    if len(set(types)) != len(types):
        raise SystemExit("weir: each --entity-type may be given once")
    padded: list[str | None] = [*names, *([None] * (len(types) - len(names)))]
    return [(ENTITY_TYPES[t], n) for t, n in zip(types, padded, strict=True)]


def run_describe(args: argparse.Namespace) -> int:
    parts = entity_parts(args.entity_type, args.entity_names)
    components = tuple(
        describe_v1.ComponentData(
            entity_type=t, match_type=i8(_match_type(name)), match=name or None
        )
        for t, name in parts
    )
    request = describe_v1.DescribeClientQuotasRequest(components=components, strict=True)
    response = _call(args, ApiKey.DESCRIBE_CLIENT_QUOTAS, request)
    if response.error_code != ErrorCode.none:
        print(f"weir: {response.error_code.name.upper()}: {response.error_message}",
              file=sys.stderr)  # fmt: skip
        return 1
    for entry in response.entries or ():
        values = ", ".join(f"{v.key}={_double(v.value)}" for v in entry.values)
        print(f"Quota configs for {_described(entry.entity)} are {values}")
    return 0


def _match_type(name: str | None) -> int:
    if name is None:
        return MATCH_SPECIFIED
    return MATCH_DEFAULT if name == "" else MATCH_EXACT


def _described(entity: Any) -> str:
    by_type = {e.entity_type: e.entity_name for e in entity}
    words = []
    for entity_type in ("user", "client-id"):
        if entity_type in by_type:
            name, kind = by_type[entity_type], _DESCRIBED_AS[entity_type]
            words.append(f"the default {kind}" if name is None else f"{kind} '{name}'")
    return ", ".join(words)


def _double(value: float) -> str:
    """As Java prints a double: 1024.0."""
    return repr(float(value))


def run_alter(args: argparse.Namespace) -> int:
    parts = entity_parts(args.entity_type, args.entity_names)
    if any(name is None for _, name in parts):
        print("weir: --entity-name or --entity-default must be given with each --entity-type "
              "for alter", file=sys.stderr)  # fmt: skip
        return 2
    ops = _ops(args)
    if not ops:
        print("weir: nothing to alter: give --add-config or --delete-config", file=sys.stderr)
        return 2
    entity = tuple(alter_v1.EntityData(entity_type=t, entity_name=n or None) for t, n in parts)
    request = alter_v1.AlterClientQuotasRequest(
        entries=(alter_v1.EntryData(entity=entity, ops=tuple(ops)),), validate_only=False
    )
    [result] = _call(args, ApiKey.ALTER_CLIENT_QUOTAS, request).entries
    if result.error_code != ErrorCode.none:
        print(f"weir: {result.error_code.name.upper()}: {result.error_message}", file=sys.stderr)
        return 1
    entity_type, name = args.entity_type[0], parts[0][1]
    if name:
        print(f"Completed updating config for {entity_type[:-1]} {name}.")
    else:
        print(f"Completed updating default config for {entity_type} in the cluster.")
    return 0


def _ops(args: argparse.Namespace) -> list[Any]:
    ops = []
    for item in args.add_config:
        for key, text in split_config_pairs(item):
            try:
                value = float(text)
            except ValueError:
                raise SystemExit(
                    f"weir: Cannot parse quota configuration value for {key}: {text}"
                ) from None
            ops.append(alter_v1.OpData(key=key, value=f64(value), remove=False))
    for item in args.delete_config:
        for key in (k.strip() for k in item.split(",")):
            if key:
                ops.append(alter_v1.OpData(key=key, value=f64(0.0), remove=True))
    return ops


def _call(args: argparse.Namespace, api_key: int, request: Any) -> Any:
    host, port = parse_host_port(args.bootstrap_server)
    security = ClientSecurity.of(security_settings(args))
    try:
        with BrokerConnection(host, port, security, timeout=ADMIN_TIMEOUT,
                              client_id="weir-quotas") as connection:  # fmt: skip
            return connection.call(api_key, 1, request)
    except BrokerConnectionError as exc:
        raise SystemExit(f"weir: {exc}") from None
