"""Kafka's ACL model: resource types, pattern types, operations and permissions with Kafka's
wire codes and names, ACL bindings (a resource pattern and an access control entry), and the
filters DescribeAcls and DeleteAcls match bindings with.

Pure data and matching: no I/O, no broker state. Text forms are Kafka's: `User:alice`,
`Topic`, `LITERAL`, `Read`, `Allow` (as stored in ZooKeeper and printed by kafka-acls.sh).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"


def _camel_case(name: str) -> str:
    """An enum member's name as Kafka spells it: CLUSTER_ACTION -> ClusterAction."""
    return "".join(part.capitalize() for part in name.split("_"))


class AclError(ValueError):
    """An ACL binding or filter that cannot be used: INVALID_REQUEST, with this message."""


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7

    @property
    def title(self) -> str:
        """Kafka's name as in ZooKeeper paths: Topic, Group, Cluster, TransactionalId."""
        return _camel_case(self.name)


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14

    @property
    def title(self) -> str:
        """Kafka's name: Read, ClusterAction, IdempotentWrite, ..."""
        return _camel_case(self.name)


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3

    @property
    def title(self) -> str:
        return self.name.capitalize()


#: the operations an ACL may name on each resource type (All on any), as Kafka lists them
SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset({
        AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
        AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    }),
    ResourceType.GROUP: frozenset({AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE}),
    ResourceType.CLUSTER: frozenset({
        AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
        AclOperation.DESCRIBE,
    }),
    ResourceType.TRANSACTIONAL_ID: frozenset({AclOperation.DESCRIBE, AclOperation.WRITE}),
}  # fmt: skip

#: an allowed operation that implies another (Kafka: Read, Write, Delete or Alter allow
#: Describe; AlterConfigs allows DescribeConfigs). Deny ACLs imply nothing.
IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset({
        AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
        AclOperation.ALTER,
    }),
    AclOperation.DESCRIBE_CONFIGS: frozenset({
        AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
    }),
}  # fmt: skip


#: KIP-430's value for "not asked" (the schema default of the *_authorized_operations fields)
OPERATIONS_NOT_REQUESTED = -(2**31)


def operations_bit_field(operations: Iterable[AclOperation]) -> int:
    """KIP-430's form of a set of operations, as Metadata and DescribeCluster carry it: bit n
    set for the operation whose code is n (Read = 3 is 1 << 3)."""
    bits = 0
    for op in operations:
        bits |= 1 << op
    return bits


def _by_text(enum_type: type[enum.IntEnum], text: str) -> int:
    """An enum member from Kafka's spelling in any case, with or without underscores."""
    wanted = text.replace("_", "").replace("-", "").lower()
    for member in enum_type:
        if member.name.replace("_", "").lower() == wanted:
            return member.value
    raise AclError(f"unknown {enum_type.__name__} {text!r}")


def resource_type(text: str) -> ResourceType:
    return ResourceType(_by_text(ResourceType, text))


def pattern_type(text: str) -> PatternType:
    return PatternType(_by_text(PatternType, text))


def operation(text: str) -> AclOperation:
    return AclOperation(_by_text(AclOperation, text))


def permission(text: str) -> AclPermissionType:
    return AclPermissionType(_by_text(AclPermissionType, text))


_PRINCIPAL = re.compile(r"^[^:]+:.*$", re.DOTALL)


def check_principal(text: str) -> str:
    """A principal as Kafka writes one, `Type:name` (`User:alice`, `User:*`)."""
    if not _PRINCIPAL.match(text) or text.startswith(":"):
        raise AclError(f"could not parse principal {text!r}: expected TYPE:NAME, as User:alice")
    return text


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def __str__(self) -> str:
        return (
            f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, "
            f"patternType={self.pattern_type.name})"
        )


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    def __str__(self) -> str:
        return (
            f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
            f"permissionType={self.permission.name})"
        )


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    def validate(self) -> AclBinding:
        """This binding, if it may be stored (CreateAcls); AclError says why not."""
        pattern, entry = self.pattern, self.entry
        if pattern.resource_type not in SUPPORTED_OPERATIONS:
            raise AclError(f"invalid resource type {pattern.resource_type.name} for an ACL")
        if pattern.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise AclError(f"invalid pattern type {pattern.pattern_type.name}: "
                           "an ACL is LITERAL or PREFIXED")  # fmt: skip
        if not pattern.name:
            raise AclError("an ACL needs a resource name")
        if pattern.resource_type is ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
            raise AclError(f"the only valid name for the CLUSTER resource is {CLUSTER_NAME}")
        check_principal(entry.principal)
        if not entry.host:
            raise AclError("an ACL needs a host (* for any)")
        allowed = SUPPORTED_OPERATIONS[pattern.resource_type] | {AclOperation.ALL}
        if entry.operation not in allowed:
            raise AclError(
                f"operation {entry.operation.title} is not valid on resource type "
                f"{pattern.resource_type.title}"
            )
        if entry.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            raise AclError(f"invalid permission type {entry.permission.name}")
        return self


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Matches bindings: ANY (and None for names) matches everything; pattern type MATCH
    matches every pattern that would apply to the named resource (the literal name, the
    wildcard `*`, and prefixes of it)."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def validate(self) -> AclBindingFilter:
        for value, kind in (
            (self.resource_type, "resource type"),
            (self.pattern_type, "pattern type"),
            (self.operation, "operation"),
            (self.permission, "permission type"),
        ):
            if value == 0:  # UNKNOWN
                raise AclError(f"a filter with an unknown {kind}")
        return self

    def matches(self, binding: AclBinding) -> bool:
        return self.matches_pattern(binding.pattern) and self.matches_entry(binding.entry)

    def matches_pattern(self, pattern: ResourcePattern) -> bool:
        if self.resource_type not in (ResourceType.ANY, pattern.resource_type):
            return False
        if self.pattern_type is PatternType.ANY:
            return self.name is None or self.name == pattern.name
        if self.pattern_type is PatternType.MATCH:
            return self.name is None or _applies(pattern, self.name)
        return self.pattern_type == pattern.pattern_type and self.name in (None, pattern.name)

    def matches_entry(self, entry: AccessControlEntry) -> bool:
        return (
            self.principal in (None, entry.principal)
            and self.host in (None, entry.host)
            and self.operation in (AclOperation.ANY, entry.operation)
            and self.permission in (AclPermissionType.ANY, entry.permission)
        )


def _applies(pattern: ResourcePattern, name: str) -> bool:
    """Whether an ACL on `pattern` applies to the resource called `name`."""
    if pattern.pattern_type is PatternType.LITERAL:
        return pattern.name in (name, WILDCARD)
    return pattern.pattern_type is PatternType.PREFIXED and name.startswith(pattern.name)


def to_document(binding: AclBinding) -> dict[str, str]:
    """One binding as a JSON object, in Kafka's spellings."""
    pattern, entry = binding.pattern, binding.entry
    return {
        "resourceType": pattern.resource_type.title,
        "name": pattern.name,
        "patternType": pattern.pattern_type.name,
        "principal": entry.principal,
        "host": entry.host,
        "operation": entry.operation.title,
        "permissionType": entry.permission.title,
    }


def from_document(document: dict[str, str]) -> AclBinding:
    return AclBinding(
        ResourcePattern(
            resource_type(document["resourceType"]),
            document["name"],
            pattern_type(document["patternType"]),
        ),
        AccessControlEntry(
            document["principal"],
            document["host"],
            operation(document["operation"]),
            permission(document["permissionType"]),
        ),
    )


def _member(kind: type[enum.IntEnum], code: int) -> Any:
    try:
        return kind(code)
    except ValueError:
        return kind(0)  # UNKNOWN: refused by validation


def binding_of(
    resource_type: int, name: str, pattern: int, principal: str, host: str, op: int, perm: int
) -> AclBinding:
    """A binding from the wire's codes (unknown codes become UNKNOWN)."""
    return AclBinding(
        ResourcePattern(_member(ResourceType, resource_type), name, _member(PatternType, pattern)),
        AccessControlEntry(
            principal, host, _member(AclOperation, op), _member(AclPermissionType, perm)
        ),
    )


def filter_of(body: Any) -> AclBindingFilter:
    """A filter from a DescribeAcls request or a DeleteAcls filter (`*_filter` fields)."""
    return AclBindingFilter(
        _member(ResourceType, body.resource_type_filter),
        body.resource_name_filter,
        _member(PatternType, getattr(body, "pattern_type_filter", PatternType.LITERAL)),
        body.principal_filter,
        body.host_filter,
        _member(AclOperation, body.operation),
        _member(AclPermissionType, body.permission_type),
    )
