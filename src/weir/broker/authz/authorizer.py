"""The broker's authorizer (`authorizer.class.name`): its ACLs, kept in an `AclStore`, and the
decisions requests ask of it for the principal and address of their connection.

Decisions are cached per (principal, host, operation, resource) until the ACLs change, so a
request pays a dictionary lookup per resource it names. A change builds a new index and an
empty cache together and swaps them in at once: a decision is never made on one index and
remembered under another.

Thread-safety: `authorize`, `describe` and the helpers run on the event loop; `create` and
`delete` write the store and run in an executor (they are serialised by a lock).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from weir.broker.authz.acl import (
    AclBinding,
    AclBindingFilter,
    AclError,
    AclOperation,
    ResourceType,
)
from weir.broker.authz.decision import (
    AclIndex,
    Policy,
    authorize,
    authorize_any,
    parse_super_users,
)
from weir.broker.authz.store import AclStore, FileAclStore
from weir.broker.config import BrokerConfig
from weir.broker.security.errors import SecurityConfigError
from weir.broker.security.session import current_session

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
        self._state = _State(AclIndex(store.load()))
        self._write_lock = threading.Lock()

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

    def create(self, bindings: Iterable[AclBinding]) -> list[AclError | None]:
        """Store the valid bindings (all together); one result per binding: None, or why it
        was refused. Blocks on the store."""
        results: list[AclError | None] = []
        valid = []
        for binding in bindings:
            try:
                valid.append(binding.validate())
                results.append(None)
            except AclError as exc:
                results.append(exc)
        if valid:
            self._change(lambda current: current | set(valid))
        return results

    def delete(self, filters: Iterable[AclBindingFilter]) -> list[list[AclBinding]]:
        """Remove every binding a filter matches; per filter, the bindings it matched.
        Blocks on the store."""
        filters = list(filters)
        matched: list[list[AclBinding]] = [[] for _ in filters]

        def remove(current: frozenset[AclBinding]) -> frozenset[AclBinding]:
            for position, acl_filter in enumerate(filters):
                matched[position] = sorted(
                    (b for b in current if acl_filter.matches(b)), key=_order
                )
            gone = {b for found in matched for b in found}
            return current - gone

        self._change(remove)
        return matched

    def _change(self, change: Callable[[frozenset[AclBinding]], frozenset[AclBinding]]) -> None:
        with self._write_lock:
            before = self._state.index.bindings
            after = frozenset(change(before))
            if after == before:
                return
            self._store.write(before, after)
            self._state = _State(AclIndex(after))


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
    """The authorizer `authorizer.class.name` names (None when empty), its ACLs kept in the
    first log directory. Refused (SecurityConfigError) for an unknown class name, and in
    cluster mode, where ACLs are not yet shared through ZooKeeper."""
    name = config.authorizer_class_name.strip()
    if not name:
        return None
    if name not in AUTHORIZER_CLASS_NAMES:
        raise SecurityConfigError(
            f"authorizer.class.name={name!r} is not supported: use "
            f"{' or '.join(sorted(AUTHORIZER_CLASS_NAMES))}, or leave it empty"
        )
    if config.zookeeper:
        raise SecurityConfigError(
            "authorizer.class.name is not supported in cluster mode (zookeeper.connect) yet: "
            "ACLs are kept by single-node brokers only"
        )
    policy = Policy(
        parse_super_users(config.super_users), _flag(config.allow_everyone_if_no_acl_found)
    )
    return Authorizer(policy, FileAclStore(config.all_log_dirs[0]))


def _flag(value: object) -> bool:
    if isinstance(value, str):
        return value.strip().lower() == "true"
    return bool(value)
