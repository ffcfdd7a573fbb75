"""Where the authorizer keeps its ACLs: one interface, two engines.

`FileAclStore` (a single node): `acls.json` in its metadata directory (the first log directory),
written whole and atomically (temp file, fsync, rename) on every change:

    {"version": 1, "acls": [{"resourceType": "Topic", "name": "orders",
      "patternType": "LITERAL", "principal": "User:alice", "host": "*",
      "operation": "Read", "permissionType": "Allow"}, ...]}

`ZooKeeperAclStore` (cluster mode): the cluster's ACLs in ZooKeeper in Kafka's layout, changed
with conditional writes and announced to every broker (`weir.cluster.zookeeper_acls`); this
class translates between Kafka's text forms there and the authorizer's model.

A change is given per resource pattern, as a function of the entries the store holds for it,
so that an engine shared by several brokers applies it to what is stored, not to what this
broker last saw.

Thread-safety (docs/threads.md): every method touches the disk or ZooKeeper and runs off the event
loop (at start-up, or in an executor); the authorizer serialises changes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from weir import diskio
from weir.broker.authz.acl import (
    AccessControlEntry,
    AclBinding,
    AclError,
    ResourcePattern,
    from_document,
    operation,
    pattern_type,
    permission,
    resource_type,
    to_document,
)
from weir.cluster.acl_znodes import AclEntry, AclResource
from weir.cluster.metadata import MetadataError
from weir.cluster.zookeeper_acls import ZooKeeperAcls
from weir.durable import write_atomically

log = logging.getLogger(__name__)

ACLS_FILE = "acls.json"
FORMAT_VERSION = 1

Entries = frozenset[AccessControlEntry]
#: a resource's entries as stored -> its entries from now on
Change = Callable[[Entries], Entries]
#: per resource changed: its entries before and after, or why it could not be changed
Outcome = tuple[Entries, Entries] | Exception


class AclStoreError(Exception):
    """The store could not be changed: UNKNOWN_SERVER_ERROR, with this message."""


class AclStore(Protocol):
    def load(self) -> frozenset[AclBinding]: ...

    def read(self, pattern: ResourcePattern) -> Entries:
        """The entries stored for one resource pattern."""
        ...

    def update(self, changes: Mapping[ResourcePattern, Change]) -> dict[ResourcePattern, Outcome]:
        """Apply each change to what the store holds for its resource pattern."""
        ...

    def watch(self, changed: Callable[[ResourcePattern], None]) -> None:
        """Call `changed(pattern)` when another broker changes a resource's ACLs."""
        ...

    def close(self) -> None: ...


def _entries_of(bindings: frozenset[AclBinding], pattern: ResourcePattern) -> Entries:
    return frozenset(b.entry for b in bindings if b.pattern == pattern)


class FileAclStore:
    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / ACLS_FILE

    def load(self) -> frozenset[AclBinding]:
        try:
            document = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return frozenset()
        if not isinstance(document, dict) or document.get("version") != FORMAT_VERSION:
            raise ValueError(f"{self.path}: not a version {FORMAT_VERSION} ACL file")
        return frozenset(from_document(entry) for entry in document.get("acls", []))

    def read(self, pattern: ResourcePattern) -> Entries:
        return _entries_of(self.load(), pattern)

    def update(self, changes: Mapping[ResourcePattern, Change]) -> dict[ResourcePattern, Outcome]:
        current = self.load()
        outcomes: dict[ResourcePattern, Outcome] = {}
        bindings = set(current)
        for pattern, change in changes.items():
            before = _entries_of(current, pattern)
            after = frozenset(change(before))
            outcomes[pattern] = (before, after)
            bindings -= {AclBinding(pattern, e) for e in before - after}
            bindings |= {AclBinding(pattern, e) for e in after - before}
        if bindings != current:
            self._write(frozenset(bindings))
        return outcomes

    def _write(self, bindings: frozenset[AclBinding]) -> None:
        entries = sorted((to_document(b) for b in bindings), key=lambda d: sorted(d.items()))
        document = {"version": FORMAT_VERSION, "acls": entries}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(self.path, [json.dumps(document, indent=1)], diskio.METADATA, 0o600)

    def watch(self, changed: Callable[[ResourcePattern], None]) -> None:
        """Only this broker changes its file."""

    def close(self) -> None:
        pass


class ZooKeeperAclStore:
    def __init__(self, acls: ZooKeeperAcls) -> None:
        self._acls = acls

    def load(self) -> frozenset[AclBinding]:
        bindings = set()
        for resource, entries in self._acls.load().items():
            pattern = _pattern(resource)
            if pattern is not None:
                bindings |= {AclBinding(pattern, e) for e in _model_entries(resource, entries)}
        return frozenset(bindings)

    def read(self, pattern: ResourcePattern) -> Entries:
        resource = _resource(pattern)
        return _model_entries(resource, self._acls.read(resource))

    def update(self, changes: Mapping[ResourcePattern, Change]) -> dict[ResourcePattern, Outcome]:
        return {pattern: self._update(pattern, change) for pattern, change in changes.items()}

    def _update(self, pattern: ResourcePattern, change: Change) -> Outcome:
        resource = _resource(pattern)

        def stored_change(stored: frozenset[AclEntry]) -> frozenset[AclEntry]:
            # entries this broker cannot read (another tool's) are kept as they are
            unreadable = frozenset(e for e in stored if _model_entry(e) is None)
            after = change(_model_entries(resource, stored))
            return unreadable | {_stored_entry(e) for e in after}

        try:
            before, after = self._acls.update(resource, stored_change)
        except ValueError as exc:  # a name ZooKeeper cannot hold
            return AclError(str(exc))
        except MetadataError as exc:
            return AclStoreError(str(exc))
        return _model_entries(resource, before), _model_entries(resource, after)

    def watch(self, changed: Callable[[ResourcePattern], None]) -> None:
        def notified(resource: AclResource) -> None:
            pattern = _pattern(resource)
            if pattern is not None:
                changed(pattern)

        self._acls.watch_changes(notified)

    def close(self) -> None:
        self._acls.close()


def _resource(pattern: ResourcePattern) -> AclResource:
    return AclResource(pattern.resource_type.title, pattern.name, pattern.pattern_type.name)


def _pattern(resource: AclResource) -> ResourcePattern | None:
    try:
        return ResourcePattern(
            resource_type(resource.resource_type), resource.name,
            pattern_type(resource.pattern_type),
        )  # fmt: skip
    except AclError as exc:
        log.warning("ignoring the ACLs of %s: %s", resource, exc)
        return None


def _stored_entry(entry: AccessControlEntry) -> AclEntry:
    return AclEntry(entry.principal, entry.permission.title, entry.operation.title, entry.host)


def _model_entry(entry: AclEntry) -> AccessControlEntry | None:
    try:
        return AccessControlEntry(
            entry.principal, entry.host, operation(entry.operation),
            permission(entry.permission_type),
        )  # fmt: skip
    except AclError:
        return None


def _model_entries(resource: AclResource, entries: frozenset[AclEntry]) -> Entries:
    """The entries in the authorizer's model; one it cannot read is logged and left out."""
    model = set()
    for stored in entries:
        entry = _model_entry(stored)
        if entry is None:
            log.warning("ignoring an unreadable ACL of %s: %s", resource, stored)
        else:
            model.add(entry)
    return frozenset(model)
