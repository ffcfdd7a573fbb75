"""`weir acl add|list|remove`: ACLs, as kafka-acls.sh manages them (its flags and its output),
through CreateAcls, DescribeAcls and DeleteAcls on the broker (confluent-kafka's AdminClient).

`add` binds every principal (`--allow-principal`/`--deny-principal`, on `--allow-host`/
`--deny-host`, `*` by default) to every operation (`--operation`, All by default) on every
resource named (`--topic`, `--group`, `--transactional-id`, `--cluster`); `--producer` and
`--consumer` stand for the operations those clients need. `remove` deletes what the same flags
describe, or every ACL of the resources when no principal is named, after asking unless
`--force`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AclBinding as ClientBinding
from confluent_kafka.admin import AclBindingFilter as ClientFilter
from confluent_kafka.admin import AclOperation as ClientOperation
from confluent_kafka.admin import AclPermissionType as ClientPermission
from confluent_kafka.admin import AdminClient, ResourcePatternType
from confluent_kafka.admin import ResourceType as ClientResourceType

from weir.broker.authz.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclError,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    check_principal,
    operation,
    pattern_type,
)
from weir.broker.authz.authorizer import order
from weir.cli import kafka_errors
from weir.cli.clients import ADMIN_TIMEOUT, add_bootstrap, add_client_settings, admin_client

Resource = tuple[ResourceType, str]
OPS = AclOperation


def register(commands: Any) -> None:
    acl = commands.add_parser("acl", help="add, list and remove ACLs (as kafka-acls.sh)")
    sub = acl.add_subparsers(dest="acl_command", required=True, metavar="ACTION")
    add = sub.add_parser("add", help="add ACLs")
    add.set_defaults(run=run_add)
    listing = sub.add_parser("list", help="list ACLs (of the resources named, or all)")
    listing.add_argument("--principal", action="append", default=[],
                         help="only the ACLs of this principal (repeatable)")  # fmt: skip
    listing.set_defaults(run=run_list)
    remove = sub.add_parser("remove", help="remove ACLs")
    remove.add_argument("--force", action="store_true", help="do not ask for confirmation")
    remove.set_defaults(run=run_remove)
    for parser in (add, listing, remove):
        add_bootstrap(parser)
        add_client_settings(parser)
        _add_resource_flags(parser)
    for parser in (add, remove):
        _add_entry_flags(parser)


def _add_resource_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topic", action="append", default=[], help="a topic (repeatable)")
    parser.add_argument("--group", action="append", default=[], help="a group (repeatable)")
    parser.add_argument("--transactional-id", action="append", default=[],
                        help="a transactional id (repeatable)")  # fmt: skip
    parser.add_argument("--cluster", action="store_true", help="the cluster")
    parser.add_argument(
        "--resource-pattern-type",
        default="LITERAL",
        help="LITERAL (default) or PREFIXED; to list or remove also ANY or MATCH",
    )


def _add_entry_flags(parser: argparse.ArgumentParser) -> None:
    for kind in ("allow", "deny"):
        parser.add_argument(f"--{kind}-principal", action="append", default=[],
                            help=f"a principal to {kind}, as User:alice (repeatable)")  # fmt: skip
        parser.add_argument(f"--{kind}-host", action="append", default=[],
                            help=f"an address the {kind} ACLs apply to (default *)")  # fmt: skip
    parser.add_argument("--operation", action="append", default=[],
                        help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
                             "DescribeConfigs, AlterConfigs, IdempotentWrite or All "
                             "(repeatable; default All)")  # fmt: skip
    parser.add_argument("--producer", action="store_true",
                        help="the operations a producer needs (Write, Describe, Create on the "
                             "topics; Write, Describe on the transactional ids)")  # fmt: skip
    parser.add_argument("--consumer", action="store_true",
                        help="the operations a consumer needs (Read, Describe on the topics, "
                             "Read on the group)")  # fmt: skip
    parser.add_argument("--idempotent", action="store_true",
                        help="with --producer: IdempotentWrite on the cluster")  # fmt: skip


# ---- what the flags name ------------------------------------------------------------------


def _resources(args: argparse.Namespace) -> list[Resource]:
    named = [(ResourceType.TOPIC, t) for t in args.topic]
    named += [(ResourceType.GROUP, g) for g in args.group]
    named += [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]
    if args.cluster:
        named.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return named


def _operations_by_resource(args: argparse.Namespace) -> dict[Resource, list[AclOperation]]:
    """Each resource with the operations to grant or remove on it."""
    if args.producer or args.consumer:
        return _client_operations(args)
    chosen = [operation(o) for o in args.operation] or [OPS.ALL]
    return {resource: chosen for resource in _resources(args)}


def _client_operations(args: argparse.Namespace) -> dict[Resource, list[AclOperation]]:
    wanted: dict[Resource, list[AclOperation]] = {}
    if args.producer:
        for topic in args.topic:
            wanted.setdefault((ResourceType.TOPIC, topic), []).extend(
                (OPS.WRITE, OPS.DESCRIBE, OPS.CREATE)
            )
        for tid in args.transactional_id:
            wanted[(ResourceType.TRANSACTIONAL_ID, tid)] = [OPS.WRITE, OPS.DESCRIBE]
        if args.idempotent:
            wanted[(ResourceType.CLUSTER, CLUSTER_NAME)] = [OPS.IDEMPOTENT_WRITE]
    if args.consumer:
        if not args.group:
            raise AclError("--consumer needs --group")
        for topic in args.topic:
            wanted.setdefault((ResourceType.TOPIC, topic), []).extend((OPS.READ, OPS.DESCRIBE))
        for group in args.group:
            wanted[(ResourceType.GROUP, group)] = [OPS.READ]
    return {resource: list(dict.fromkeys(ops)) for resource, ops in wanted.items()}


def _entries(args: argparse.Namespace, ops: list[AclOperation]) -> list[AccessControlEntry]:
    entries = []
    for kind, permission in (("allow", AclPermissionType.ALLOW), ("deny", AclPermissionType.DENY)):
        hosts = getattr(args, f"{kind}_host") or ["*"]
        for principal in getattr(args, f"{kind}_principal"):
            check_principal(principal)
            entries += [
                AccessControlEntry(principal, h, op, permission) for h in hosts for op in ops
            ]
    return entries


# ---- commands -----------------------------------------------------------------------------


def run_add(args: argparse.Namespace) -> int:
    try:
        kind = pattern_type(args.resource_pattern_type)
        if kind not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise AclError("--resource-pattern-type must be LITERAL or PREFIXED to add ACLs")
        by_resource = _operations_by_resource(args)
        if not by_resource:
            raise AclError("name a resource: --topic, --group, --transactional-id or --cluster")
        if not args.allow_principal and not args.deny_principal:
            raise AclError("name a principal: --allow-principal or --deny-principal")
        bindings = {
            ResourcePattern(rtype, name, kind): [
                AclBinding(ResourcePattern(rtype, name, kind), e) for e in _entries(args, ops)
            ]
            for (rtype, name), ops in by_resource.items()
        }
    except AclError as exc:
        return _usage(exc)
    admin = admin_client(args)
    for pattern, group in bindings.items():
        print(f"Adding ACLs for resource `{pattern}`: ")
        print("".join(f" \t{b.entry} \n" for b in group))
    try:
        futures = admin.create_acls(
            [_to_client(b) for group in bindings.values() for b in group],
            request_timeout=ADMIN_TIMEOUT,
        )
        for future in futures.values():
            future.result()
    except KafkaException as exc:
        return _fail(exc)
    return _print_current(admin, bindings)


def run_list(args: argparse.Namespace) -> int:
    try:
        filters = _filters(args, args.principal or [None])
    except AclError as exc:
        return _usage(exc)
    admin = admin_client(args)
    found: set[AclBinding] = set()
    try:
        for acl_filter in filters:
            found.update(map(_from_client, admin.describe_acls(
                acl_filter, request_timeout=ADMIN_TIMEOUT).result()))  # fmt: skip
    except KafkaException as exc:
        return _fail(exc)
    _print_by_resource(found)
    return 0


def run_remove(args: argparse.Namespace) -> int:
    principals = [*args.allow_principal, *args.deny_principal]
    try:
        filters = _remove_filters(args, principals)
    except AclError as exc:
        return _usage(exc)
    if not args.force and not _confirmed(args, principals):
        return 0
    admin = admin_client(args)
    try:
        futures = admin.delete_acls(filters, request_timeout=ADMIN_TIMEOUT)
        removed = [_from_client(b) for future in futures.values() for b in future.result()]
    except KafkaException as exc:
        return _fail(exc)
    for binding in removed:
        print(f"Removed ACL for resource `{binding.pattern}`: {binding.entry}")
    return 0


def _remove_filters(args: argparse.Namespace, principals: list[str]) -> list[ClientFilter]:
    if not _resources(args):
        raise AclError("name a resource: --topic, --group, --transactional-id or --cluster")
    if not principals:  # every ACL of the resources
        return _filters(args, [None])
    filters = []
    kind = _client_pattern(args.resource_pattern_type)
    for (rtype, name), ops in _operations_by_resource(args).items():
        for entry in _entries(args, ops):
            filters.append(_client_filter(
                _client_type(rtype), name, kind, entry.principal, entry.host,
                ClientOperation[entry.operation.name], ClientPermission[entry.permission.name],
            ))  # fmt: skip
    return filters


def _filters(args: argparse.Namespace, principals: Iterable[str | None]) -> list[ClientFilter]:
    """Filters for the resources named (every resource when none), for each principal."""
    kind = _client_pattern(args.resource_pattern_type)
    named: list[tuple[ClientResourceType, str | None]] = [
        (_client_type(rtype), name) for rtype, name in _resources(args)
    ] or [(ClientResourceType.ANY, None)]
    if not _resources(args) and args.resource_pattern_type.upper() == "LITERAL":
        kind = ResourcePatternType.ANY  # listing everything: every pattern type
    return [
        _client_filter(
            rtype, name, kind, principal, None, ClientOperation.ANY, ClientPermission.ANY
        )
        for rtype, name in named
        for principal in principals
    ]


def _confirmed(args: argparse.Namespace, principals: list[str]) -> bool:
    what = "the ACLs of " + ", ".join(principals) if principals else "all ACLs"
    for rtype, name in _resources(args):
        pattern = ResourcePattern(rtype, name, pattern_type(args.resource_pattern_type))
        try:
            answer = input(
                f"Are you sure you want to remove {what} for resource `{pattern}`? (y/n)"
            )
        except EOFError:
            return False
        if answer.strip().lower() not in ("y", "yes"):
            return False
    return True


# ---- conversions and output ----------------------------------------------------------------


def _client_pattern(text: str) -> ResourcePatternType:
    try:
        return ResourcePatternType[pattern_type(text).name]
    except KeyError:
        raise AclError(f"unknown resource pattern type {text!r}") from None


def _client_type(resource_type: ResourceType) -> ClientResourceType:
    """The client's name for a resource type: librdkafka calls Kafka's CLUSTER (4) BROKER."""
    if resource_type is ResourceType.CLUSTER:
        return ClientResourceType.BROKER
    return ClientResourceType[resource_type.name]


def _weir_type(resource_type: ClientResourceType) -> ResourceType:
    if resource_type is ClientResourceType.BROKER:
        return ResourceType.CLUSTER
    return ResourceType[resource_type.name]


def _client_filter(*fields: Any) -> ClientFilter:
    """A client filter: None stands for any name, principal or host (librdkafka's NULL)."""
    return ClientFilter(*fields)


def _to_client(binding: AclBinding) -> ClientBinding:
    pattern, entry = binding.pattern, binding.entry
    return ClientBinding(
        _client_type(pattern.resource_type), pattern.name,
        ResourcePatternType[pattern.pattern_type.name], entry.principal, entry.host,
        ClientOperation[entry.operation.name], ClientPermission[entry.permission.name],
    )  # fmt: skip


def _from_client(binding: Any) -> AclBinding:
    return AclBinding(
        ResourcePattern(
            _weir_type(binding.restype), binding.name,
            PatternType[binding.resource_pattern_type.name],
        ),
        AccessControlEntry(
            binding.principal, binding.host, AclOperation[binding.operation.name],
            AclPermissionType[binding.permission_type.name],
        ),
    )  # fmt: skip


def _print_current(admin: AdminClient, patterns: Iterable[ResourcePattern]) -> int:
    found: set[AclBinding] = set()
    try:
        for pattern in patterns:
            acl_filter = _client_filter(
                _client_type(pattern.resource_type), pattern.name,
                ResourcePatternType[pattern.pattern_type.name], None, None,
                ClientOperation.ANY, ClientPermission.ANY,
            )  # fmt: skip
            result = admin.describe_acls(acl_filter, request_timeout=ADMIN_TIMEOUT).result()
            found.update(map(_from_client, result))
    except KafkaException as exc:
        return _fail(exc)
    _print_by_resource(found)
    return 0


def _print_by_resource(bindings: Iterable[AclBinding]) -> None:
    """kafka-acls.sh's listing: a header per resource pattern, an entry per line."""
    by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for b in order(bindings):
        by_pattern.setdefault(b.pattern, []).append(b.entry)
    for pattern, entries in by_pattern.items():
        print(f"Current ACLs for resource `{pattern}`: ")
        print("".join(f" \t{entry} \n" for entry in entries))


def _usage(exc: AclError) -> int:
    print(f"weir: {exc}", file=sys.stderr)
    return 2


def _fail(exc: KafkaException) -> int:
    return kafka_errors.fail(exc)
