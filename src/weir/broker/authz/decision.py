"""Kafka's authorization decision, as a pure function of the ACLs and the request.

A principal may perform an operation on a resource when it is a super user; or when no ACL
applies to the resource at all and `allow.everyone.if.no.acl.found` is set; or when an Allow
ACL grants it (the operation itself, All, or an operation that implies it) and no Deny ACL
refuses it (the operation itself or All: deny wins). An ACL applies to a resource when its
pattern is the resource's literal name, the literal wildcard `*`, or a prefix of the name
(PREFIXED); to a principal when it names it or `User:*`; to a client when its host is the
client's address or `*`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from weir.broker.authz.acl import (
    IMPLIED_BY,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

Entries = tuple[AccessControlEntry, ...]


@dataclass(frozen=True, slots=True)
class Policy:
    """`super.users` and `allow.everyone.if.no.acl.found`."""

    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False


def parse_super_users(text: str) -> frozenset[str]:
    """`super.users`: principals separated by semicolons (`User:admin;User:ops`)."""
    return frozenset(part.strip() for part in text.split(";") if part.strip())


class AclIndex:
    """The ACLs of a broker, indexed by resource for the decision: literal names in one map,
    prefixes per resource type in another. Immutable: a change builds a new index."""

    __slots__ = ("_literal", "_prefixed", "bindings")

    def __init__(self, bindings: Iterable[AclBinding] = ()) -> None:
        self.bindings = frozenset(bindings)
        literal: dict[tuple[ResourceType, str], list[AccessControlEntry]] = {}
        prefixed: dict[ResourceType, dict[str, list[AccessControlEntry]]] = {}
        for binding in self.bindings:
            pattern = binding.pattern
            if pattern.pattern_type is PatternType.PREFIXED:
                by_prefix = prefixed.setdefault(pattern.resource_type, {})
                by_prefix.setdefault(pattern.name, []).append(binding.entry)
            else:
                literal.setdefault((pattern.resource_type, pattern.name), []).append(binding.entry)
        self._literal = {key: tuple(entries) for key, entries in literal.items()}
        self._prefixed = {
            kind: {prefix: tuple(entries) for prefix, entries in by_prefix.items()}
            for kind, by_prefix in prefixed.items()
        }

    def applicable(self, resource_type: ResourceType, name: str) -> Entries:
        """Every entry of an ACL that applies to the resource `name` of `resource_type`."""
        found: list[AccessControlEntry] = []
        found += self._literal.get((resource_type, name), ())
        if name != WILDCARD:
            found += self._literal.get((resource_type, WILDCARD), ())
        for prefix, entries in self._prefixed.get(resource_type, {}).items():
            if name.startswith(prefix):
                found += entries
        return tuple(found)

    def of_type(self, resource_type: ResourceType) -> Entries:
        """Every entry of an ACL on a resource of this type."""
        found: list[AccessControlEntry] = []
        for (kind, _), entries in self._literal.items():
            if kind is resource_type:
                found += entries
        for entries in self._prefixed.get(resource_type, {}).values():
            found += entries
        return tuple(found)


def authorize(
    index: AclIndex,
    policy: Policy,
    principal: str,
    host: str,
    operation: AclOperation,
    resource_type: ResourceType,
    name: str,
) -> bool:
    if principal in policy.super_users:
        return True
    entries = index.applicable(resource_type, name)
    return _decide(policy, principal, host, operation, entries, entries)


def _decide(
    policy: Policy,
    principal: str,
    host: str,
    operation: AclOperation,
    entries: Entries,
    denying: Entries,
) -> bool:
    """For a principal that is no super user: `policy`'s answer when no ACL applies
    (`entries` empty), else no Deny in `denying` and an Allow in `entries`."""
    if not entries:
        return policy.allow_everyone_if_no_acl_found
    if _exists(denying, principal, host, {operation}, AclPermissionType.DENY):
        return False
    allowing = IMPLIED_BY.get(operation, frozenset({operation}))
    return _exists(entries, principal, host, allowing, AclPermissionType.ALLOW)


def _exists(
    entries: Entries,
    principal: str,
    host: str,
    operations: set[AclOperation] | frozenset[AclOperation],
    permission: AclPermissionType,
) -> bool:
    return any(
        entry.permission is permission
        and entry.principal in (principal, WILDCARD_PRINCIPAL)
        and entry.host in (host, WILDCARD)
        and (entry.operation in operations or entry.operation is AclOperation.ALL)
        for entry in entries
    )


def authorize_any(
    index: AclIndex,
    policy: Policy,
    principal: str,
    host: str,
    operation: AclOperation,
    resource_type: ResourceType,
) -> bool:
    """Whether some resource of the type allows the operation: a super user; no ACL on the
    type at all with `allow.everyone.if.no.acl.found`; otherwise an Allow ACL for the
    operation, unless a Deny on the literal wildcard `*` refuses every resource."""
    if principal in policy.super_users:
        return True
    entries = index.of_type(resource_type)
    wildcard = index.applicable(resource_type, WILDCARD) if entries else ()
    return _decide(policy, principal, host, operation, entries, wildcard)
