"""The broker's authorizer (`authorizer.class.name`): its ACLs, kept in an `AclStore` (a file
on a single node, ZooKeeper in cluster mode), and the decisions requests ask of it for the
principal and address of their connection.

Decisions are cached per (principal, host, operation, resource) until the ACLs change, so a
request pays a dictionary lookup per resource it names. A change builds a new index and an
empty cache together and swaps them in at once: a decision is never made on one index and
remembered under another. In cluster mode a change another broker announces reloads that
resource from the store and swaps in the same way, so every broker decides on it within a
moment (Kafka's AclAuthorizer does the same).

Thread-safety (docs/threads.md): `authorize`, `describe` and the helpers run on the event loop;
`create` and `delete` write the store and run in an executor; they and the reloads announced by the
store (on its own thread) are serialised by a lock. Decisions never wait for it.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from weir.broker.authz.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclError,
    AclOperation,
    ResourcePattern,
    ResourceType,
)
from weir.broker.authz.decision import (
    AclIndex,
    Policy,
    authorize,
    authorize_any,
    parse_super_users,
)
from weir.broker.authz.store import (
    AclStore,
    Change,
    Entries,
    FileAclStore,
    Outcome,
    ZooKeeperAclStore,
)
from weir.broker.config import BrokerConfig
from weir.broker.security.errors import SecurityConfigError
from weir.broker.security.session import current_session
from weir.cluster.zookeeper_acls import ZooKeeperAcls

#: Kafka's class names for its ACL authorizer (ZooKeeper era, and KRaft's)
AUTHORIZER_CLASS_NAMES = frozenset({
    "kafka.security.authorizer.AclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
})  # fmt: skip
#: decisions remembered before the cache starts over (bounds memory under many principals)
MAX_CACHED_DECISIONS = 100_000

DecisionKey = tuple[str, str, AclOperation, ResourceType, str]


@dataclass(slots=True)
class _State:
    index: AclIndex
    decisions: dict[DecisionKey, bool] = field(default_factory=dict)


class Authorizer:
    def __init__(self, policy: Policy, store: AclStore) -> None:
        self.policy = policy
        self._store = store
        # re-entrant: the store may announce a change from within `watch`, on this thread
        self._lock = threading.RLock()
        with self._lock:  # a change announced while loading waits for the load
            self._state = _State(AclIndex())
            store.watch(self._reload)
            self._state = _State(AclIndex(store.load()))

    def close(self) -> None:
        """End the store's session (cluster mode). Blocks."""
        self._store.close()

    # ---- decisions ----------------------------------------------------------------------------

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        state = self._state
        key = (principal, host, operation, resource_type, name)
        decided = state.decisions.get(key)
        if decided is None:
            decided = authorize(
                state.index, self.policy, principal, host, operation, resource_type, name
            )
            if len(state.decisions) >= MAX_CACHED_DECISIONS:
                state.decisions.clear()
            state.decisions[key] = decided
        return decided

    def allows(self, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        """Whether the connection of the request being served may do this (outside a
        request, the broker itself: yes)."""
        session = current_session()
        if session is None:
            return True
        return self.authorize(
            str(session.principal), session.client_address, operation, resource_type, name
        )

    def allows_any(self, operation: AclOperation, resource_type: ResourceType) -> bool:
        """Whether the connection may do this on some resource of the type (Kafka's test for
        an idempotent producer without IdempotentWrite: Write on any topic)."""
        session = current_session()
        if session is None:
            return True
        return authorize_any(
            self._state.index, self.policy, str(session.principal), session.client_address,
            operation, resource_type,
        )  # fmt: skip

    # ---- the ACLs -----------------------------------------------------------------------------

    @property
    def bindings(self) -> frozenset[AclBinding]:
        return self._state.index.bindings

    def describe(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        return [b for b in self.bindings if acl_filter.matches(b)]

    def create(self, bindings: Iterable[AclBinding]) -> list[Exception | None]:
        """Store the valid bindings; one result per binding: None, or why it was refused (an
        AclError for an invalid binding, an AclStoreError when the store failed). Blocks on
        the store."""
        bindings = list(bindings)
        results: list[Exception | None] = []
        added: dict[ResourcePattern, set[AccessControlEntry]] = {}
        for binding in bindings:
            try:
                binding.validate()
                results.append(None)
                added.setdefault(binding.pattern, set()).add(binding.entry)
            except AclError as exc:
                results.append(exc)
        outcomes = self._update({
            pattern: functools.partial(_with, frozenset(entries))
            for pattern, entries in added.items()
        })  # fmt: skip
        for position, binding in enumerate(bindings):
            outcome = outcomes.get(binding.pattern)
            if results[position] is None and isinstance(outcome, Exception):
                results[position] = outcome
        return results

    def delete(self, filters: Iterable[AclBindingFilter]) -> list[list[AclBinding] | Exception]:
        """Remove every binding a filter matches, on the resources this broker knows to match
        (as Kafka does); per filter, the bindings it matched, or why the store failed. Blocks
        on the store."""
        filters = list(filters)
        patterns = {
            b.pattern for b in self.bindings if any(f.matches_pattern(b.pattern) for f in filters)
        }
        outcomes = self._update({p: functools.partial(_without, p, filters) for p in patterns})
        matched: list[list[AclBinding] | Exception] = [[] for _ in filters]
        for pattern, outcome in outcomes.items():
            for position, acl_filter in enumerate(filters):
                found = matched[position]
                if isinstance(found, Exception) or not acl_filter.matches_pattern(pattern):
                    continue
                if isinstance(outcome, Exception):
                    matched[position] = outcome
                    continue
                before, after = outcome
                gone = (AclBinding(pattern, e) for e in before - after)
                found += [b for b in gone if acl_filter.matches(b)]
        return [found if isinstance(found, Exception) else order(found) for found in matched]

    def _update(self, changes: Mapping[ResourcePattern, Change]) -> dict[ResourcePattern, Outcome]:
        if not changes:
            return {}
        with self._lock:
            outcomes = self._store.update(changes)
            self._install({
                pattern: outcome[1]
                for pattern, outcome in outcomes.items()
                if not isinstance(outcome, Exception)
            })  # fmt: skip
        return outcomes

    def _reload(self, pattern: ResourcePattern) -> None:
        """A change another broker announced: the resource's entries read again."""
        with self._lock:
            self._install({pattern: self._store.read(pattern)})

    def _install(self, entries: Mapping[ResourcePattern, Entries]) -> None:
        """Make `entries` the resources' ACLs: a new index with an empty decision cache."""
        current = self._state.index.bindings
        kept = {b for b in current if b.pattern not in entries}
        new = frozenset(kept | {AclBinding(p, e) for p, found in entries.items() for e in found})
        if new != current:
            self._state = _State(AclIndex(new))


def _with(added: Entries, stored: Entries) -> Entries:
    return stored | added


def _without(pattern: ResourcePattern, filters: list[AclBindingFilter], stored: Entries) -> Entries:
    return frozenset(
        e for e in stored if not any(f.matches(AclBinding(pattern, e)) for f in filters)
    )


def _order(binding: AclBinding) -> tuple[int, str, int, str, str, int, int]:
    pattern, entry = binding.pattern, binding.entry
    return (
        pattern.resource_type, pattern.name, pattern.pattern_type,
        entry.principal, entry.host, entry.operation, entry.permission,
    )  # fmt: skip


def order(bindings: Iterable[AclBinding]) -> list[AclBinding]:
    """Bindings in a stable order: by resource, then entry."""
    return sorted(bindings, key=_order)


def from_config(config: BrokerConfig) -> Authorizer | None:
    """The authorizer `authorizer.class.name` names (None when empty): its ACLs kept in the
    first log directory, or in cluster mode (`zookeeper.connect`) in ZooKeeper, shared by every
    broker. Refused (SecurityConfigError) for an unknown class name. Blocks on ZooKeeper."""
    name = config.authorizer_class_name.strip()
    if not name:
        return None
    if name not in AUTHORIZER_CLASS_NAMES:
        raise SecurityConfigError(
            f"authorizer.class.name={name!r} is not supported: use "
            f"{' or '.join(sorted(AUTHORIZER_CLASS_NAMES))}, or leave it empty"
        )
    policy = Policy(
        parse_super_users(config.super_users), _flag(config.allow_everyone_if_no_acl_found)
    )
    return Authorizer(policy, _store(config))


def _store(config: BrokerConfig) -> AclStore:
    if not config.zookeeper:
        return FileAclStore(config.all_log_dirs[0])
    acls = ZooKeeperAcls(config.zookeeper, session_timeout_ms=config.zookeeper_session_timeout_ms)
    acls.start(config.zookeeper_connection_timeout_ms / 1000)
    return ZooKeeperAclStore(acls)


def _flag(value: object) -> bool:
    if isinstance(value, str):
        return value.strip().lower() == "true"
    return bool(value)
