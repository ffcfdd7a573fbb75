"""The cluster's state in ZooKeeper: paths and the JSON of each znode, in Kafka's layout.

```
/cluster/id                                  {"version": "1", "id": CLUSTER_ID}
/controller                   (ephemeral)    {"version": 2, "brokerid": N, "timestamp": "MS"}
/controller_epoch                            "E"
/brokers/ids/N                (ephemeral)    {"version": 5, "host", "port", "endpoints", "rack",
                                               "pool" (weir's, when the broker has one)}
/brokers/topics/T                            {"version": 3, "topic_id", "partitions": {"P": [N...]}}
/brokers/topics/T/partitions/P/state         {"version": 1, "controller_epoch", "leader",
                                              "leader_epoch", "isr": [N...]}
/config/topics/T                             {"version": 1, "config": {NAME: VALUE}}
/config/users/U                              {"version": 1, "config": {"SCRAM-SHA-512": "salt=...,
                                              stored_key=...,server_key=...,iterations=N"}}
/config/brokers/N | <default>                {"version": 1, "config": {NAME: VALUE}} (dynamic broker
                                              configs: one broker's, or the cluster's default)
/config/users/U | <default>                  client quotas of a user (in the same config as its
/config/users/U/clients/C | <default>        SCRAM credentials), of a user's client id, and of a
/config/clients/C | <default>                client id: {"version": 1, "config":
                                              {"producer_byte_rate": "1024"}}
/config/changes/config_change_NNNNNNNNNN     {"version": 2, "entity_path": "topics/T" | "users/U"
                                              | "users/U/clients/C" | "clients/C" | "brokers/N"
                                              | "brokers/<default>"}
/admin/delete_topics/T                       (a deletion request for the controller)
/admin/preferred_replica_election            {"version": 1, "partitions": [{"topic", "partition"}]}
/latest_producer_id_block                    {"version": 1, "broker", "block_start", "block_end"}
```

Parsing is strict: a znode that does not hold what its path says raises `ZnodeFormatError`, which
callers log and skip, so one malformed znode never stops a broker or the controller.
Pure: no ZooKeeper client here.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.parse
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

CLUSTER_ID = "/cluster/id"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
CONFIG_TOPICS = "/config/topics"
CONFIG_USERS = "/config/users"
CONFIG_BROKERS = "/config/brokers"
#: the entity types of /config/<type>/<entity>
USERS, BROKERS, CLIENTS = "users", "brokers", "clients"
#: the entity that holds a type's default (the cluster-wide dynamic broker config)
DEFAULT_ENTITY = "<default>"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"

#: persistent paths every cluster has; created by the first broker that finds them missing
BASE_PATHS = (BROKER_IDS, BROKER_TOPICS, CONFIG_TOPICS, CONFIG_CHANGES, DELETE_TOPICS)

NO_LEADER = -1
_DECIMAL = re.compile(r"-?[0-9]+")
_TOPIC_ID = re.compile(r"[A-Za-z0-9_-]{22}")


class ZnodeFormatError(ValueError):
    """A znode's data is not what its path should hold."""


def broker_path(node_id: int) -> str:
    return f"{BROKER_IDS}/{node_id}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}"


def state_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}/state"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def user_config_path(user: str) -> str:
    """A user's config znode; the name is URL-encoded as Kafka's Sanitizer writes it."""
    return entity_config_path(USERS, user)


def entity_configs_path(entity_type: str) -> str:
    return f"/config/{entity_type}"


def entity_config_path(entity_type: str, entity: str) -> str:
    """An entity's config znode: its name URL-encoded as Kafka's Sanitizer writes it, except
    the type's `<default>`."""
    return f"/config/{entity_type}/{_entity_name(entity)}"


def _entity_name(entity: str) -> str:
    return entity if entity == DEFAULT_ENTITY else sanitize(entity)


def quota_entity_path(user: str | None, client_id: str | None) -> str:
    """The entity path of a client quota's config (`users/U`, `users/U/clients/C`,
    `clients/C`; names sanitized, `<default>` as it is): /config/ + this is its znode, and a
    change notification names it."""
    if user is not None and client_id is not None:
        return f"{USERS}/{_entity_name(user)}/{CLIENTS}/{_entity_name(client_id)}"
    if user is not None:
        return f"{USERS}/{_entity_name(user)}"
    if client_id is not None:
        return f"{CLIENTS}/{_entity_name(client_id)}"
    raise ValueError("a client quota entity names a user, a client id or both")


def parse_quota_entity_path(entity_path: str) -> tuple[str | None, str | None] | None:
    """(user, client id) of a client quota's entity path; None if it is no such path."""
    parts = entity_path.split("/")
    if len(parts) == 2 and parts[0] in (USERS, CLIENTS) and parts[1]:
        name = desanitize(parts[1])
        return (name, None) if parts[0] == USERS else (None, name)
    if len(parts) == 4 and parts[0] == USERS and parts[2] == CLIENTS and parts[1] and parts[3]:
        return desanitize(parts[1]), desanitize(parts[3])
    return None


def sanitize(name: str) -> str:
    """Kafka's Sanitizer: URL encoding that keeps letters, digits and `-_.~` (so `*` and
    space are %2A and %20)."""
    return urllib.parse.quote(name, safe="")


def desanitize(name: str) -> str:
    return urllib.parse.unquote(name)


def delete_request_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


# ---- values ------------------------------------------------------------------------------------


#: Kafka's numbers for the security protocols (UpdateMetadata's endpoints carry them)
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    """One advertised listener of a broker: `NAME://HOST:PORT` and its security protocol."""

    listener: str
    security_protocol: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener}://{host}:{self.port}"


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerRegistration:
    """A live broker. `host` and `port` are its PLAINTEXT endpoint, else its first one;
    `endpoints` are all its listeners (given none, the one PLAINTEXT endpoint at host:port)."""

    node_id: int
    host: str
    port: int
    rack: str | None = None
    #: the czxid of the registration znode: a broker's epoch, new at every registration
    epoch: int = -1
    endpoints: tuple[BrokerEndpoint, ...] = ()
    #: its `broker.pool` (weir's; absent from Kafka's registrations)
    pool: str | None = None

    def __post_init__(self) -> None:
        if not self.endpoints:
            plaintext = BrokerEndpoint("PLAINTEXT", "PLAINTEXT", self.host, self.port)
            object.__setattr__(self, "endpoints", (plaintext,))

    @property
    def all_endpoints(self) -> tuple[BrokerEndpoint, ...]:
        return self.endpoints

    def address(self, listener: str | None) -> tuple[str, int] | None:
        """The address of the named listener (None: host:port); None if it has no such one."""
        if listener is None:
            return self.host, self.port
        for endpoint in self.all_endpoints:
            if endpoint.listener == listener:
                return endpoint.host, endpoint.port
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicAssignment:
    name: str
    topic_id: uuid.UUID
    #: partition -> replica list; the first live replica in it is the preferred leader
    partitions: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    #: partitions being reassigned: the replicas being added and those being removed (Kafka's
    #: `adding_replicas` / `removing_replicas`); `partitions` then holds both sets together
    adding: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    removing: Mapping[int, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionState:
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int


# ---- encoding ----------------------------------------------------------------------------------


def _dump(document: Mapping[str, Any]) -> bytes:
    return json.dumps(document, separators=(",", ":"), sort_keys=True).encode()


def _load(data: bytes | None, what: str) -> dict[str, Any]:
    try:
        document = json.loads(data or b"")
    except (ValueError, UnicodeDecodeError) as exc:
        raise ZnodeFormatError(f"{what}: not JSON ({exc})") from None
    if not isinstance(document, dict):
        raise ZnodeFormatError(f"{what}: expected a JSON object, got {type(document).__name__}")
    return document


def _int(document: Mapping[str, Any], key: str, what: str) -> int:
    value = document.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ZnodeFormatError(f"{what}: {key!r} is not an integer: {value!r}")
    return value


def _ids(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise ZnodeFormatError(f"{what}: expected a list of broker ids, got {value!r}")
    return tuple(value)


def topic_id_text(topic_id: uuid.UUID) -> str:
    """Kafka's text form of a Uuid: URL-safe base64 of its 16 bytes, without padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def parse_topic_id(text: str) -> uuid.UUID:
    """Strict, as Kafka's Uuid.fromString: 22 characters of the URL-safe alphabet."""
    if not _TOPIC_ID.fullmatch(text):
        raise ZnodeFormatError(f"topic id {text!r} is not a base64 Uuid")
    try:
        return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))
    except (ValueError, TypeError):
        raise ZnodeFormatError(f"topic id {text!r} is not a base64 Uuid") from None


def encode_broker(registration: BrokerRegistration, timestamp_ms: int) -> bytes:
    endpoints = registration.all_endpoints
    plaintext = [e for e in endpoints if e.security_protocol == "PLAINTEXT"]
    return _dump({
        "version": 5,
        "host": plaintext[0].host if plaintext else None,
        "port": plaintext[0].port if plaintext else -1,
        "endpoints": [str(e) for e in endpoints],
        "listener_security_protocol_map": {e.listener: e.security_protocol for e in endpoints},
        "jmx_port": -1,
        "rack": registration.rack,
        "features": {},
        "timestamp": str(timestamp_ms),
        **({"pool": registration.pool} if registration.pool else {}),
    })  # fmt: skip


def parse_broker(node_id: int, data: bytes | None, epoch: int = -1) -> BrokerRegistration:
    what = broker_path(node_id)
    document = _load(data, what)
    endpoints = _endpoints(document)
    host, port = document.get("host"), document.get("port")
    # host and port: the PLAINTEXT endpoint, else the first one
    plaintext = [e for e in endpoints if e.security_protocol == "PLAINTEXT"]
    for endpoint in plaintext[:1] or endpoints[:1]:
        host, port = endpoint.host, endpoint.port
    if not isinstance(host, str) or not host or isinstance(port, bool) or not isinstance(port, int):
        raise ZnodeFormatError(f"{what}: no endpoint (host and port)")
    rack = document.get("rack")
    if rack is not None and not isinstance(rack, str):
        raise ZnodeFormatError(f"{what}: rack is not a string: {rack!r}")
    pool = document.get("pool")
    if pool is not None and not isinstance(pool, str):
        raise ZnodeFormatError(f"{what}: pool is not a string: {pool!r}")
    return BrokerRegistration(
        node_id=node_id, host=host, port=port, rack=rack, epoch=epoch, endpoints=endpoints,
        pool=pool,
    )  # fmt: skip


def _endpoints(document: Mapping[str, Any]) -> tuple[BrokerEndpoint, ...]:
    """`endpoints` (`NAME://HOST:PORT`) with their protocols from
    `listener_security_protocol_map` (a name missing there is its own protocol's name)."""
    texts = document.get("endpoints")
    protocols = document.get("listener_security_protocol_map") or {}
    if not isinstance(texts, list) or not isinstance(protocols, dict):
        return ()
    out = []
    for text in texts:
        if not isinstance(text, str):
            continue
        name, _, address = text.partition("://")
        host, _, port = address.rpartition(":")
        protocol = protocols.get(name, name)
        if host and _DECIMAL.fullmatch(port) and protocol in SECURITY_PROTOCOL_IDS:
            out.append(BrokerEndpoint(name, protocol, host.strip("[]"), int(port)))
        # an endpoint that is not NAME://HOST:PORT cannot be reached: left out
    return tuple(out)


def encode_assignment(assignment: TopicAssignment) -> bytes:
    return _dump({
        "version": 3,
        "topic_id": topic_id_text(assignment.topic_id),
        "partitions": {str(p): list(r) for p, r in sorted(assignment.partitions.items())},
        "adding_replicas": {str(p): list(r) for p, r in sorted(assignment.adding.items()) if r},
        "removing_replicas": {str(p): list(r) for p, r in sorted(assignment.removing.items())
                              if r},
    })  # fmt: skip


def parse_assignment(topic: str, data: bytes | None) -> TopicAssignment:
    what = topic_path(topic)
    document = _load(data, what)
    text = document.get("topic_id")
    if not isinstance(text, str):
        raise ZnodeFormatError(f"{what}: no topic_id")
    raw = document.get("partitions")
    if not isinstance(raw, dict) or not raw:
        raise ZnodeFormatError(f"{what}: no partitions")
    partitions: dict[int, tuple[int, ...]] = {}
    for key, replicas in raw.items():
        if not (isinstance(key, str) and _DECIMAL.fullmatch(key) and not key.startswith("-")):
            raise ZnodeFormatError(f"{what}: partition {key!r} is not a number")
        partitions[int(key)] = _ids(replicas, f"{what} partition {key}")
        if not partitions[int(key)]:
            raise ZnodeFormatError(f"{what}: partition {key} has no replicas")
    if sorted(partitions) != list(range(len(partitions))):
        raise ZnodeFormatError(f"{what}: partitions are not numbered 0..{len(partitions) - 1}")
    adding = _moving(document, "adding_replicas", partitions, what)
    removing = _moving(document, "removing_replicas", partitions, what)
    return TopicAssignment(name=topic, topic_id=parse_topic_id(text), partitions=partitions,
                           adding=adding, removing=removing)  # fmt: skip


def _moving(document: Mapping[str, Any], key: str, partitions: Mapping[int, tuple[int, ...]],
            what: str) -> dict[int, tuple[int, ...]]:  # fmt: skip
    """A reassignment's replicas being added or removed (only those that are replicas of the
    partition: Kafka writes them among `partitions`)."""
    raw = document.get(key) or {}
    if not isinstance(raw, dict):
        raise ZnodeFormatError(f"{what}: {key} is not an object")
    out = {}
    for text, replicas in raw.items():
        index = int(text) if isinstance(text, str) and text.isdigit() else -1
        if index not in partitions:
            raise ZnodeFormatError(f"{what}: {key} names partition {text!r}, which it lacks")
        listed = _ids(replicas, f"{what} {key} {text}")
        out[index] = tuple(r for r in listed if r in partitions[index])  # none other counts
    return {index: replicas for index, replicas in out.items() if replicas}


def encode_state(state: PartitionState) -> bytes:
    return _dump({
        "version": 1,
        "controller_epoch": state.controller_epoch,
        "leader": state.leader,
        "leader_epoch": state.leader_epoch,
        "isr": list(state.isr),
    })  # fmt: skip


def parse_state(topic: str, partition: int, data: bytes | None) -> PartitionState:
    what = state_path(topic, partition)
    document = _load(data, what)
    return PartitionState(
        leader=_int(document, "leader", what),
        leader_epoch=_int(document, "leader_epoch", what),
        isr=_ids(document.get("isr"), what),
        controller_epoch=_int(document, "controller_epoch", what),
    )


def encode_controller(node_id: int, timestamp_ms: int) -> bytes:
    return _dump({"version": 2, "brokerid": node_id, "timestamp": str(timestamp_ms)})


def parse_controller(data: bytes | None) -> int:
    return _int(_load(data, CONTROLLER), "brokerid", CONTROLLER)


def parse_controller_epoch(data: bytes | None) -> int:
    try:
        text = (data or b"").decode()
    except UnicodeDecodeError:
        text = ""
    if not _DECIMAL.fullmatch(text):
        raise ZnodeFormatError(f"{CONTROLLER_EPOCH}: {data!r} is not a number")
    return int(text)


def encode_topic_config(configs: Mapping[str, str]) -> bytes:
    return _dump({"version": 1, "config": dict(configs)})


def parse_topic_config(topic: str, data: bytes | None, what: str = "") -> dict[str, str]:
    what = what or topic_config_path(topic)
    config = _load(data, what).get("config", {})
    if not isinstance(config, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in config.items()
    ):
        raise ZnodeFormatError(f"{what}: config is not an object of strings")
    return dict(config)


def encode_config_change(topic: str) -> bytes:
    return _dump({"version": 2, "entity_path": f"topics/{topic}"})


def encode_user_config_change(user: str) -> bytes:
    return encode_entity_config_change(USERS, user)


def encode_entity_config_change(entity_type: str, entity: str) -> bytes:
    return encode_change_path(f"{entity_type}/{_entity_name(entity)}")


def encode_change_path(entity_path: str) -> bytes:
    """A change notification naming an entity path ("users/alice/clients/app1")."""
    return _dump({"version": 2, "entity_path": entity_path})


def parse_config_change(data: bytes | None) -> str | None:
    """The topic a change notification names; None for other entity types."""
    kind, name = parse_change_entity(data)
    return name if kind == "topics" and name else None


def parse_change_path(data: bytes | None) -> str:
    """The entity path a change notification names: "users/alice/clients/app1"."""
    entity = _load(data, CONFIG_CHANGES).get("entity_path")
    if not isinstance(entity, str):
        raise ZnodeFormatError(f"{CONFIG_CHANGES}: no entity_path")
    return entity


def parse_change_entity(data: bytes | None) -> tuple[str, str]:
    """(entity type, entity name) of a change notification: ("users", "alice")."""
    entity = _load(data, CONFIG_CHANGES).get("entity_path")
    if not isinstance(entity, str):
        raise ZnodeFormatError(f"{CONFIG_CHANGES}: no entity_path")
    kind, _, name = entity.partition("/")
    return kind, desanitize(name)


def encode_user_config(configs: Mapping[str, str]) -> bytes:
    return encode_entity_config(configs)


def parse_user_config(user: str, data: bytes | None) -> dict[str, str]:
    """`{"version": 1, "config": {"SCRAM-SHA-512": "salt=...,..."}}` -> the config."""
    return parse_entity_config(user_config_path(user), data)


def encode_entity_config(configs: Mapping[str, str]) -> bytes:
    return _dump({"version": 1, "config": dict(configs)})


def parse_entity_config(path: str, data: bytes | None) -> dict[str, str]:
    """A user's, client's or broker's config znode (at `path`) -> its config. A znode without
    data (a user's, made as the parent of its clients' configs) has an empty config."""
    if not data:
        return {}
    return parse_topic_config("", data, path)


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dump({"version": "1", "id": cluster_id})


def parse_cluster_id(data: bytes | None) -> str:
    value = _load(data, CLUSTER_ID).get("id")
    if not isinstance(value, str) or not value:
        raise ZnodeFormatError(f"{CLUSTER_ID}: no id")
    return value


def encode_producer_block(node_id: int, first: int, last: int) -> bytes:
    return _dump({
        "version": 1, "broker": node_id, "block_start": str(first), "block_end": str(last),
    })  # fmt: skip


def parse_producer_block_end(data: bytes | None) -> int:
    """The last producer id handed out so far; -1 when none was."""
    if not data:
        return -1
    value = _load(data, PRODUCER_ID_BLOCK).get("block_end")
    if isinstance(value, str) and _DECIMAL.fullmatch(value):
        return int(value)
    raise ZnodeFormatError(f"{PRODUCER_ID_BLOCK}: no block_end number in {value!r}")


def parse_partition_list(data: bytes | None) -> list[tuple[str, int]]:
    """`{"version": 1, "partitions": [{"topic": T, "partition": P}, ...]}` (the admin znodes'
    form) -> [(T, P), ...]."""
    entries = _load(data, PREFERRED_REPLICA_ELECTION).get("partitions")
    if not isinstance(entries, list):
        raise ZnodeFormatError(f"{PREFERRED_REPLICA_ELECTION}: no partitions list")
    out = []
    for entry in entries:
        if not isinstance(entry, dict):
            raise ZnodeFormatError(f"{PREFERRED_REPLICA_ELECTION}: {entry!r} is not an object")
        topic = entry.get("topic")
        if not isinstance(topic, str):
            raise ZnodeFormatError(f"{PREFERRED_REPLICA_ELECTION}: {entry!r} names no topic")
        out.append((topic, _int(entry, "partition", PREFERRED_REPLICA_ELECTION)))
    return out


def live_replicas(replicas: Sequence[int], live: set[int] | frozenset[int]) -> list[int]:
    return [r for r in replicas if r in live]


def encode_reassignment(targets: Mapping[tuple[str, int], Sequence[int]]) -> bytes:
    """`/admin/reassign_partitions`: `{"version": 1, "partitions": [{"topic": T, "partition":
    P, "replicas": [...]}, ...]}`, as Kafka's ZooKeeper-based tools write it."""
    return _dump({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(r)} for (t, p), r in sorted(targets.items())
    ]})  # fmt: skip


def parse_reassignment(data: bytes | None) -> dict[tuple[str, int], tuple[int, ...]]:
    """The partitions `/admin/reassign_partitions` asks to move and their target replicas."""
    what = REASSIGN_PARTITIONS
    entries = _load(data, what).get("partitions")
    if not isinstance(entries, list):
        raise ZnodeFormatError(f"{what}: no partitions list")
    out = {}
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("topic"), str):
            raise ZnodeFormatError(f"{what}: {entry!r} names no topic")
        tp = (entry["topic"], _int(entry, "partition", what))
        out[tp] = _ids(entry.get("replicas"), f"{what} {tp[0]}-{tp[1]}")
    return out
