"""ACLs in ZooKeeper: paths and the JSON of each znode, in Kafka's layout (its ZooKeeper-era
`AclAuthorizer`), so the cluster's ACLs read the same to weir and to Kafka's tools.

```
/kafka-acl/<ResourceType>/<name>                     LITERAL patterns
/kafka-acl-extended/prefixed/<ResourceType>/<name>   PREFIXED patterns
    {"version": 1, "acls": [{"principal": "User:alice", "permissionType": "Allow",
                             "operation": "Read", "host": "*"}, ...]}
/kafka-acl-changes/acl_changes_NNNNNNNNNN            (sequential) "TOPIC:orders"
/kafka-acl-extended-changes/acl_changes_NNNNNNNNNN   (sequential) {"version": 1,
    "resourceType": "TOPIC", "name": "orders-", "patternType": "PREFIXED"}
```

`<ResourceType>` in a path is Kafka's title (Topic, Group, Cluster, TransactionalId); a change
notification names it as Kafka's enum does (TOPIC, TRANSACTIONAL_ID); both are read in any case.

Values are Kafka's spellings as text: this layer knows nothing of the authorizer (the broker
layer turns them into its ACL model). Parsing is strict (`ZnodeFormatError`). Pure: no client.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from weir.cluster.znodes import ZnodeFormatError

LITERAL_ACLS = "/kafka-acl"
EXTENDED_ACLS = "/kafka-acl-extended"
PREFIXED_ACLS = f"{EXTENDED_ACLS}/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
LITERAL = "LITERAL"
PREFIXED = "PREFIXED"
#: the pattern types stored, with the znode under which each keeps its ACLs
ACL_ROOTS = {LITERAL: LITERAL_ACLS, PREFIXED: PREFIXED_ACLS}
#: the persistent paths the authorizer needs; created by the first broker that finds them missing
ACL_PATHS = (LITERAL_ACLS, PREFIXED_ACLS, LITERAL_CHANGES, EXTENDED_CHANGES)
FORMAT_VERSION = 1

#: a path's resource type (Kafka's title) by its enum name
_TITLES = {
    "TOPIC": "Topic",
    "GROUP": "Group",
    "CLUSTER": "Cluster",
    "TRANSACTIONAL_ID": "TransactionalId",
    "DELEGATION_TOKEN": "DelegationToken",
    "USER": "User",
}
_BY_FOLDED = {key.replace("_", ""): title for key, title in _TITLES.items()}
_ENUM_NAMES = {title: key for key, title in _TITLES.items()}
_ENTRY_KEYS = ("principal", "permissionType", "operation", "host")


@dataclass(frozen=True, slots=True)
class AclResource:
    """A resource pattern: `resource_type` a title (Topic), `pattern_type` LITERAL or PREFIXED."""

    resource_type: str
    name: str
    pattern_type: str


@dataclass(frozen=True, slots=True)
class AclEntry:
    """One access control entry as Kafka writes it: `User:alice`, `Allow`, `Read`, `*`."""

    principal: str
    permission_type: str
    operation: str
    host: str


def resource_type_title(text: str) -> str:
    """Kafka's title of a resource type given in any of its spellings (TOPIC, Topic, topic)."""
    title = _BY_FOLDED.get(text.replace("_", "").upper())
    if title is None:
        raise ZnodeFormatError(f"unknown ACL resource type {text!r}")
    return title


def check_name(name: str) -> str:
    """A resource name that can be a znode's name: ZooKeeper paths cannot hold `/` (or be `.`
    or `..`), so Kafka's ZooKeeper-era authorizer cannot store ACLs on such names either."""
    if not name or "/" in name or name in (".", "..") or "\x00" in name:
        raise ValueError(f"resource name {name!r} cannot be a znode's name (no '/', '.', '..')")
    return name


def resource_path(resource: AclResource) -> str:
    root = ACL_ROOTS.get(resource.pattern_type)
    if root is None:
        raise ValueError(f"pattern type {resource.pattern_type} is not stored in ZooKeeper")
    return f"{root}/{resource.resource_type}/{check_name(resource.name)}"


def changes_path(resource: AclResource) -> str:
    """Where a change of this resource is announced."""
    return LITERAL_CHANGES if resource.pattern_type == LITERAL else EXTENDED_CHANGES


def encode_acls(entries: Iterable[AclEntry]) -> bytes:
    ordered = sorted(entries, key=lambda e: (e.principal, e.permission_type, e.operation, e.host))
    acls = [dict(zip(_ENTRY_KEYS, _fields(e), strict=True)) for e in ordered]
    return json.dumps({"version": FORMAT_VERSION, "acls": acls}).encode()


def _fields(entry: AclEntry) -> tuple[str, str, str, str]:
    return entry.principal, entry.permission_type, entry.operation, entry.host


def parse_acls(path: str, data: bytes | None) -> frozenset[AclEntry]:
    document = _document(path, data)
    acls = document.get("acls")
    if not isinstance(acls, list):
        raise ZnodeFormatError(f"{path}: no list of acls")
    entries = []
    for acl in acls:
        if not isinstance(acl, dict) or not all(isinstance(acl.get(k), str) for k in _ENTRY_KEYS):
            raise ZnodeFormatError(f"{path}: an ACL without {', '.join(_ENTRY_KEYS)}: {acl!r}")
        entries.append(AclEntry(*(acl[k] for k in _ENTRY_KEYS)))
    return frozenset(entries)


def encode_change(resource: AclResource) -> bytes:
    """The notification of a change of `resource`: `TYPE:name` for a literal pattern (Kafka's
    legacy form), JSON for the others."""
    enum_name = _ENUM_NAMES[resource.resource_type]
    if resource.pattern_type == LITERAL:
        return f"{enum_name}:{resource.name}".encode()
    return json.dumps({
        "version": FORMAT_VERSION, "resourceType": enum_name, "name": resource.name,
        "patternType": resource.pattern_type,
    }).encode()  # fmt: skip


def parse_change(changes: str, data: bytes | None) -> AclResource:
    """The resource a notification under `changes` (LITERAL_CHANGES or EXTENDED_CHANGES) names."""
    if changes == LITERAL_CHANGES:
        text = (data or b"").decode("utf-8", "replace")
        kind, colon, name = text.partition(":")
        if not colon:
            raise ZnodeFormatError(f"{changes}: expected RESOURCE_TYPE:NAME, got {text!r}")
        return AclResource(resource_type_title(kind), name, LITERAL)
    document = _document(changes, data)
    fields = [document.get(k) for k in ("resourceType", "name", "patternType")]
    texts = [f for f in fields if isinstance(f, str)]
    if len(texts) != len(fields):
        raise ZnodeFormatError(f"{changes}: a change without resourceType, name, patternType")
    resource_type, resource_name, pattern = texts
    if pattern.upper() not in ACL_ROOTS:
        raise ZnodeFormatError(f"{changes}: unknown pattern type {pattern!r}")
    return AclResource(resource_type_title(resource_type), resource_name, pattern.upper())


def change_sequence(child: str) -> int | None:
    """The sequence number of a notification znode's name; None for another child."""
    digits = child.removeprefix(CHANGE_PREFIX)
    if digits == child or not digits.isdigit():
        return None
    return int(digits)


def _document(path: str, data: bytes | None) -> dict[str, object]:
    try:
        document = json.loads(data or b"")
    except (ValueError, UnicodeDecodeError) as exc:
        raise ZnodeFormatError(f"{path}: not JSON ({exc})") from None
    if not isinstance(document, dict) or document.get("version") != FORMAT_VERSION:
        raise ZnodeFormatError(f"{path}: not a version {FORMAT_VERSION} document")
    return document
