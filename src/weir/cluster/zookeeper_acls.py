"""The ZooKeeper engine of the ACL store: the cluster's ACLs in Kafka's layout
(`weir.cluster.acl_znodes`), shared by every broker, as Kafka's ZooKeeper-era authorizer keeps them.

Like Kafka's authorizer it holds its own ZooKeeper session (beside the metadata store's). A change
reads the resource's znode with its version, applies the change and writes back on that version
only (create if absent, delete when no ACL is left); a concurrent writer makes the write fail with
a version conflict and the change is applied again to what that writer stored, so two brokers
changing one resource never lose either change. Each change is announced with a sequential znode
under `/kafka-acl-changes` or `/kafka-acl-extended-changes`; every broker watches both and hands
each newly announced resource to its listener, in order. Announcements older than
`CHANGE_EXPIRY_S` are deleted by whichever broker sees them.

Thread-safety (docs/threads.md): every method may be called from any thread and blocks on ZooKeeper
(from an event loop, run it in an executor). The change listener runs on kazoo's callback thread,
one notification at a time.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.watchers import ChildrenWatch

from weir.cluster import acl_znodes
from weir.cluster.acl_znodes import AclEntry, AclResource
from weir.cluster.metadata import MetadataError
from weir.cluster.znodes import ZnodeFormatError
from weir.cluster.zookeeper import ZooKeeperAddress, ZooKeeperUnavailableError

log = logging.getLogger(__name__)

#: conditional writes tried before a change is given up (Kafka's maxUpdateRetries)
MAX_UPDATE_ATTEMPTS = 10
#: the longest random pause before trying a conflicted write again
UPDATE_BACKOFF_S = 0.05
#: change notifications older than this are deleted (Kafka: 15 minutes)
CHANGE_EXPIRY_S = 15 * 60

Entries = frozenset[AclEntry]
Change = Callable[[Entries], Entries]


class AclUpdateError(MetadataError):
    """A change of a resource's ACLs could not be stored."""

    error_code = -1  # UNKNOWN_SERVER_ERROR, as Kafka answers a failed ACL update


class ZooKeeperAcls:
    def __init__(self, connect: str, *, session_timeout_ms: int = 18_000) -> None:
        self.address = ZooKeeperAddress.parse(connect)
        # The chroot is a prefix of our own: a client rooted in it could not create it.
        self.client = KazooClient(
            hosts=self.address.hosts,
            timeout=session_timeout_ms / 1000,
            connection_retry={"max_tries": -1, "delay": 0.2, "max_delay": 2.0},
        )
        self._last_change: dict[str, int] = {}
        self._listener: Callable[[AclResource], None] | None = None
        self._closed = threading.Event()

    def _path(self, path: str) -> str:
        return self.address.chroot + path

    # ---- session --------------------------------------------------------------------------------

    def start(self, timeout_s: float) -> None:
        """Connect and create the ACL paths; ZooKeeperUnavailableError after `timeout_s`."""
        try:
            self.client.start(timeout=timeout_s)
        except KazooTimeoutError:
            self.client.stop()
            raise ZooKeeperUnavailableError(
                f"ZooKeeper at {self.address.hosts} did not answer within {timeout_s:.0f} s"
            ) from None
        for path in acl_znodes.ACL_PATHS:
            self.client.ensure_path(self._path(path))

    def close(self) -> None:
        self._closed.set()
        try:
            self.client.stop()
            self.client.close()
        except KazooException as exc:
            log.warning("closing the ACL store's ZooKeeper session: %s", exc)

    # ---- reading --------------------------------------------------------------------------------

    def load(self) -> dict[AclResource, Entries]:
        """Every resource's ACLs (malformed znodes are logged and skipped)."""
        found: dict[AclResource, Entries] = {}
        for pattern_type, root in acl_znodes.ACL_ROOTS.items():
            for kind in self._children(root):
                try:
                    title = acl_znodes.resource_type_title(kind)
                except ZnodeFormatError as exc:
                    log.warning("ignoring %s/%s: %s", root, kind, exc)
                    continue
                for name in self._children(f"{root}/{kind}"):
                    resource = AclResource(title, name, pattern_type)
                    entries = self.read(resource)
                    if entries:
                        found[resource] = entries
        return found

    def read(self, resource: AclResource) -> Entries:
        return self._read_versioned(resource)[0]

    def _read_versioned(self, resource: AclResource) -> tuple[Entries, int]:
        """The resource's ACLs and its znode's version (-1: no znode)."""
        path = acl_znodes.resource_path(resource)
        try:
            data, stat = self.client.get(self._path(path))
        except NoNodeError:
            return frozenset(), -1
        try:
            return acl_znodes.parse_acls(path, data), stat.version
        except ZnodeFormatError as exc:
            log.warning("ACLs of %s unreadable, taken as none: %s", path, exc)
            return frozenset(), stat.version

    def _children(self, path: str) -> list[str]:
        try:
            return list(self.client.get_children(self._path(path)))
        except NoNodeError:
            return []

    # ---- changing -------------------------------------------------------------------------------

    def update(self, resource: AclResource, change: Change) -> tuple[Entries, Entries]:
        """Apply `change` to the resource's stored ACLs with a conditional write, again on a
        conflict; the ACLs before and after. Announces the change when there was one."""
        try:
            return self._update(resource, change)
        except AclUpdateError:
            raise
        except KazooException as exc:
            raise AclUpdateError(f"ZooKeeper failed the ACL update: {exc!r}") from None

    def _update(self, resource: AclResource, change: Change) -> tuple[Entries, Entries]:
        path = self._path(acl_znodes.resource_path(resource))
        for _ in range(MAX_UPDATE_ATTEMPTS):
            before, version = self._read_versioned(resource)
            after = frozenset(change(before))
            if after == before:
                return before, after
            try:
                self._write(path, after, version)
            except (BadVersionError, NodeExistsError, NoNodeError):
                time.sleep(random.uniform(0, UPDATE_BACKOFF_S))
                continue
            self._announce(resource)
            return before, after
        raise AclUpdateError(
            f"the ACLs of {path} changed under {MAX_UPDATE_ATTEMPTS} attempts to update them"
        )

    def _write(self, path: str, after: Entries, version: int) -> None:
        if not after:
            self.client.delete(path, version=version)
        elif version < 0:
            self.client.create(path, acl_znodes.encode_acls(after), makepath=True)
        else:
            self.client.set(path, acl_znodes.encode_acls(after), version=version)

    def _announce(self, resource: AclResource) -> None:
        changes = self._path(acl_znodes.changes_path(resource))
        self.client.create(
            f"{changes}/{acl_znodes.CHANGE_PREFIX}",
            acl_znodes.encode_change(resource),
            sequence=True,
        )

    # ---- change notifications -------------------------------------------------------------------

    def watch_changes(self, listener: Callable[[AclResource], None]) -> None:
        """Call `listener(resource)` for each change announced from now on (in order, on kazoo's
        thread). Call before `load` so that no change falls between the two."""
        self._listener = listener
        for changes in (acl_znodes.LITERAL_CHANGES, acl_znodes.EXTENDED_CHANGES):
            sequences = [acl_znodes.change_sequence(c) for c in self._children(changes)]
            self._last_change[changes] = max((s for s in sequences if s is not None), default=-1)
            ChildrenWatch(self.client, self._path(changes), self._on_changes(changes))

    def _on_changes(self, changes: str) -> Callable[[list[str]], bool]:
        def changed(children: list[str]) -> bool:
            if self._closed.is_set():
                return False
            try:
                self._process(changes, children)
            except KazooException as exc:
                log.warning("reading the ACL change notifications under %s: %s", changes, exc)
            return True

        return changed

    def _process(self, changes: str, children: list[str]) -> None:
        numbered = sorted(
            (seq, child)
            for child in children
            if (seq := acl_znodes.change_sequence(child)) is not None
        )
        for seq, child in numbered:
            if seq <= self._last_change[changes]:
                continue
            self._notify(changes, child)
            self._last_change[changes] = seq
        self._purge(changes, numbered)

    def _notify(self, changes: str, child: str) -> None:
        try:
            data, _ = self.client.get(self._path(f"{changes}/{child}"))
            resource = acl_znodes.parse_change(changes, data)
        except NoNodeError:
            return
        except ZnodeFormatError as exc:
            log.warning("ignoring ACL change notification %s/%s: %s", changes, child, exc)
            return
        if self._listener is not None:
            try:
                self._listener(resource)
            except Exception:
                log.exception("ACL change listener failed for %s", resource)

    def _purge(self, changes: str, numbered: list[tuple[int, str]]) -> None:
        expired_before_ms = (time.time() - CHANGE_EXPIRY_S) * 1000
        for _, child in numbered:
            path = self._path(f"{changes}/{child}")
            stat = self.client.exists(path)
            if stat is not None and stat.ctime >= expired_before_ms:
                return
            with contextlib.suppress(NoNodeError):
                self.client.delete(path)
