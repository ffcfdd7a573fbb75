"""Broker configuration: Kafka's broker setting names, from a TOML file and command-line flags.

A TOML file holds a flat table of Kafka-style names (`"log.segment.bytes" = 1048576` or nested
`[log] segment.bytes = ...`); flags override it. Topic-level defaults (the broker synonyms of the
topic-config table, `log.*` and a few others) become the LogConfig every topic starts from.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from weir.broker.disk_health import DiskThrottleSettings
from weir.broker.partition_limit import default_max_partitions_per_broker
from weir.broker.security.listeners import (
    DEFAULT_PROTOCOL_MAP,
    Listener,
    ListenerConfigError,
    inter_broker_listener,
    parse_endpoint,
    parse_listeners,
)
from weir.storage import LogConfig
from weir.storage.config import BROKER_SYNONYMS, NO_LIMIT, TOPIC_CONFIGS

#: broker settings in other units that also set a topic default: name -> (topic config, factor).
#: Kafka reads them when the `.ms` form is absent, as here: the `.ms` form wins.
SCALED_SYNONYMS = {
    "log.retention.hours": ("retention.ms", 3_600_000),
    "log.retention.minutes": ("retention.ms", 60_000),
    "log.roll.hours": ("segment.ms", 3_600_000),
    "log.roll.jitter.hours": ("segment.jitter.ms", 3_600_000),
}
#: command-line flags (BrokerConfig fields) -> the Kafka setting each stands for
FLAG_SETTINGS = {
    "data_dir": "log.dirs",
    "node_id": "node.id",
    "listen_host": "listeners",
    "listen_port": "listeners",
    "advertised_host": "advertised.listeners",
    "advertised_port": "advertised.listeners",
    "rack": "broker.rack",
    "zookeeper": "zookeeper.connect",
}
#: settings DescribeConfigs never shows (Kafka reports them as sensitive, without a value)
SENSITIVE_SETTINGS = {"ssl_key_password", "ssl_keystore_key", "sasl_plain_users"}
#: per-listener overrides: `listener.name.<listener>.<setting>`
LISTENER_PREFIX = "listener.name."
#: PLAIN users, one setting per user: `sasl.plain.users.<user> = "<password>"`
PLAIN_USERS_PREFIX = "sasl.plain.users."
_NOT_SETTINGS = {
    "log_defaults", "explicit", "data_dir", "log_dirs", "listeners", "advertised_listeners",
    "listener_overrides", *SENSITIVE_SETTINGS, *FLAG_SETTINGS,
}  # fmt: skip


#: `replica.selector.class` values -> whether consumers read from a replica in their rack
REPLICA_SELECTORS = {
    "leader": False,
    "org.apache.kafka.common.replica.LeaderSelector": False,
    "rack-aware": True,
    "org.apache.kafka.common.replica.RackAwareReplicaSelector": True,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerConfig:
    node_id: int = 0
    listen_host: str = "127.0.0.1"
    listen_port: int = 9092
    advertised_host: str | None = None
    advertised_port: int | None = None
    data_dir: Path = Path("weir-data")
    log_dirs: tuple[Path, ...] = ()
    log_dir_min_free_bytes: int = 8 * 1024 * 1024
    max_connections: int = 2**31 - 1
    max_connections_per_ip: int = 2**31 - 1
    queued_max_request_bytes: int = 256 * 1024 * 1024
    #: client quotas' rates are measured over this many samples of this many seconds each
    quota_window_num: int = 11
    quota_window_size_seconds: int = 1
    #: replication throttles' rates likewise
    replication_quota_window_num: int = 11
    replication_quota_window_size_seconds: int = 1
    rack: str | None = None
    #: the pool of brokers this one belongs to (a tenant's machines); topics pinned to a pool
    #: (`replica.placement.pool`) are placed on its brokers only, the others on brokers of none
    broker_pool: str | None = None
    zookeeper: str | None = None
    zookeeper_session_timeout_ms: int = 18_000
    zookeeper_connection_timeout_ms: int = 18_000
    controller_socket_timeout_ms: int = 30_000
    replica_lag_time_max_ms: int = 30_000
    #: which replica a consumer that names its rack (`client.rack`) reads from (KIP-392):
    #: `leader` (Kafka's default) or `rack-aware` (an in-sync replica in the consumer's rack;
    #: Kafka's class name `org.apache.kafka.common.replica.RackAwareReplicaSelector` too)
    replica_selector_class: str = "leader"
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    leader_imbalance_per_broker_percentage: int = 10
    socket_request_max_bytes: int = 100 * 1024 * 1024
    auto_create_topics_enable: bool = True
    num_partitions: int = 1
    default_replication_factor: int = 1
    #: the most partition replicas one broker hosts; creation past it (times the live brokers)
    #: is refused with POLICY_VIOLATION. Default: from RLIMIT_NOFILE, vm.max_map_count, memory
    max_partitions_per_broker: int = field(default_factory=default_max_partitions_per_broker)
    log_retention_check_interval_ms: int = 300_000
    log_flush_offset_checkpoint_interval_ms: int = 60_000
    log_cleaner_backoff_ms: int = 15_000
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3_000
    group_max_size: int = 2**31 - 1
    offsets_topic_num_partitions: int = 50
    offsets_topic_replication_factor: int = 3
    offsets_retention_minutes: int = 7 * 24 * 60
    offset_metadata_max_bytes: int = 4096
    transaction_max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    transaction_state_log_num_partitions: int = 50
    transaction_state_log_replication_factor: int = 3
    transaction_state_log_min_isr: int = 2
    transaction_state_log_segment_bytes: int = 100 * 1024 * 1024
    #: KIP-890: a partition leader checks with the coordinator that a producer's first
    #: transactional batch on a partition belongs to its ongoing transaction
    transaction_partition_verification_enable: bool = True
    #: `listeners` as Kafka writes it (`NAME://HOST:PORT,...`); None: one PLAINTEXT listener on
    #: listen_host:listen_port. The first listener's address is listen_host:listen_port too.
    listeners: str | None = None
    advertised_listeners: str | None = None
    listener_security_protocol_map: str = DEFAULT_PROTOCOL_MAP
    #: the listener other brokers use; default: the first PLAINTEXT listener, else the first
    inter_broker_listener_name: str | None = None
    #: Kafka's older way to choose it: the listener named after this protocol (not with
    #: inter.broker.listener.name)
    security_inter_broker_protocol: str | None = None
    #: TLS (SSL and SASL_SSL listeners), from PEM files or PEM text: `ssl.keystore.location` is
    #: one file with the private key and the certificate chain; `ssl.keystore.certificate.chain`
    #: and `ssl.keystore.key` hold the same as text; `ssl.key.password` decrypts the key
    ssl_keystore_type: str = "PEM"
    ssl_keystore_location: str | None = None
    ssl_keystore_certificate_chain: str | None = None
    ssl_keystore_key: str | None = None
    ssl_key_password: str | None = None
    #: the CA certificates client certificates are checked against (a PEM file, or PEM text)
    ssl_truststore_type: str = "PEM"
    ssl_truststore_location: str | None = None
    ssl_truststore_certificates: str | None = None
    #: whether TLS clients must present a certificate: required, requested or none
    ssl_client_auth: str = "none"
    ssl_enabled_protocols: str = "TLSv1.2,TLSv1.3"
    #: whether this broker, connecting to another over TLS, checks that the certificate names
    #: the host it connected to: `https` (Kafka's default) or empty
    ssl_endpoint_identification_algorithm: str = "https"
    ssl_cipher_suites: str | None = None
    #: mechanisms SASL listeners offer (per listener:
    #: `listener.name.<listener>.sasl.enabled.mechanisms`)
    sasl_enabled_mechanisms: str = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
    #: user -> password for SASL/PLAIN (`sasl.plain.users.<user>`, or a TOML table
    #: `sasl.plain.users = {alice = "secret"}`)
    sasl_plain_users: dict[str, str] = field(default_factory=dict)
    #: the mechanism this broker authenticates with on a SASL inter-broker listener; its user
    #: and password: `listener.name.<listener>.<mechanism>.sasl.jaas.config`
    sasl_mechanism_inter_broker_protocol: str = "PLAIN"
    #: the largest SASL token accepted before a connection has authenticated
    sasl_server_max_receive_size: int = 512 * 1024
    #: how long a connection may take to finish its TLS handshake and SASL authentication
    #: before it is closed
    connections_authentication_timeout_ms: int = 10_000
    #: how long a connection whose authentication failed stays open after the refusal is sent
    connection_failed_authentication_delay_ms: int = 100
    #: the ACL authorizer: Kafka's `kafka.security.authorizer.AclAuthorizer` or
    #: `org.apache.kafka.metadata.authorizer.StandardAuthorizer`; empty: no authorization
    authorizer_class_name: str = ""
    #: principals the authorizer allows everything, separated by semicolons (`User:admin`)
    super_users: str = ""
    #: whether a resource no ACL names is open to everyone (Kafka's default: no)
    allow_everyone_if_no_acl_found: bool = False
    #: replication throttles in bytes per second (Kafka's dynamic broker quotas): the leader's
    #: and the followers' for the topics' throttled replicas, and moves between log directories
    leader_replication_throttled_rate: int = NO_LIMIT
    follower_replication_throttled_rate: int = NO_LIMIT
    replica_alter_log_dirs_io_max_bytes_per_second: int = NO_LIMIT
    #: the sizes of Kafka's thread pools: accepted, validated and reported as Kafka does; weir's
    #: event loop and executors are not sized by them
    num_io_threads: int = 8
    num_network_threads: int = 3
    num_replica_fetchers: int = 1
    num_recovery_threads_per_data_dir: int = 2
    #: how many incremental fetch sessions (KIP-227) the broker keeps; 0: none
    max_incremental_fetch_session_cache_slots: int = 1000
    #: how long a session must have been idle before any new session may take its slot
    min_incremental_fetch_session_eviction_ms: int = 120_000
    background_threads: int = 10
    #: Prometheus metrics at http://metrics.host:metrics.port/metrics (weir.broker.metrics);
    #: 0: not served. The host defaults to the first listener's
    metrics_port: int = 0
    metrics_host: str = ""
    #: how often the consumer lag of the groups coordinated here is sampled for the metrics
    consumer_lag_sample_interval_ms: int = 10_000
    #: audit: every client's produce and fetch counted per minute per client and partition and
    #: written to the compacted internal topic `__audit` (weir.broker.audit)
    audit_enable: bool = False
    #: how often the counts that changed are written to `__audit`
    audit_flush_interval_ms: int = 60_000
    #: the shape of `__audit` when a broker creates it (the replication factor in a cluster)
    audit_topic_num_partitions: int = 1
    audit_topic_replication_factor: int = 3
    #: partition-level throttling by disk health (weir.broker.disk_health): when a log
    #: directory's device is busier or slower than these, the partitions reading it most from
    #: cold offsets have those reads held to the rate
    disk_throttle_enable: bool = False
    disk_throttle_util_threshold: float = 0.9
    disk_throttle_await_ms_threshold: float = 50.0
    disk_throttle_partition_bytes_per_second: int = 1_048_576
    disk_health_sample_interval_ms: int = 1000
    #: the slow lane (weir.broker.slow_lane): threads that read files for connections whose
    #: sends held the event loop longer than the threshold; 0 threads: no lane
    num_slow_lane_threads: int = 2
    slow_lane_send_threshold_ms: float = 20.0
    #: listener name -> {setting: value}, from `listener.name.<listener>.<setting>`
    listener_overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    log_defaults: LogConfig = field(default_factory=LogConfig)
    explicit: frozenset[str] = frozenset()  # Kafka names set in the file or by flags

    def __post_init__(self) -> None:
        if self.replica_selector_class not in REPLICA_SELECTORS:
            raise ValueError(
                f"replica.selector.class must be one of {', '.join(REPLICA_SELECTORS)}, "
                f"not {self.replica_selector_class!r}"
            )
        problems = self.disk_throttle.problems()
        if self.num_slow_lane_threads < 0 or self.slow_lane_send_threshold_ms <= 0:
            problems.append(f"num.slow.lane.threads must be 0 or more and "
                            f"slow.lane.send.threshold.ms above 0, not "
                            f"{self.num_slow_lane_threads} and "
                            f"{self.slow_lane_send_threshold_ms:g}")  # fmt: skip
        if problems:
            raise ValueError("; ".join(problems))
        if self.audit_flush_interval_ms < 1 or self.audit_topic_num_partitions < 1:
            raise ValueError(
                "audit.flush.interval.ms and audit.topic.num.partitions must be at least 1"
            )
        if self.inter_broker_listener_name and self.security_inter_broker_protocol:
            raise ListenerConfigError(
                "set inter.broker.listener.name or security.inter.broker.protocol, not both"
            )
        endpoints = self.endpoints
        self.inter_broker_listener  # noqa: B018 (checks that it names a listener)
        names = {listener.name for listener in endpoints}
        for name in self.listener_overrides:
            if name not in names:
                raise ListenerConfigError(
                    f"{LISTENER_PREFIX}{name.lower()}.* names no listener in listeners"
                )

    @property
    def endpoints(self) -> tuple[Listener, ...]:
        """The listeners, in order; the first one listens on listen_host:listen_port and
        advertises advertised_host:advertised_port when those are set."""
        text = self.listeners
        if text is None:
            text = f"PLAINTEXT://{_address(self.listen_host, self.listen_port)}"
        listeners = parse_listeners(
            text, self.listener_security_protocol_map, self.advertised_listeners
        )
        first = replace(
            listeners[0],
            host=self.listen_host,
            port=self.listen_port,
            advertised_host=self.advertised_host or listeners[0].advertised_host,
            advertised_port=self.advertised_port or listeners[0].advertised_port,
        )
        return (first, *listeners[1:])

    @property
    def inter_broker_listener(self) -> Listener:
        name = self.inter_broker_listener_name or self.security_inter_broker_protocol
        return inter_broker_listener(self.endpoints, name)

    def listener_setting(self, listener: str, name: str) -> Any:
        """A setting as one listener sees it: its `listener.name.<listener>.<name>` override,
        else the broker-wide value."""
        overrides = self.listener_overrides.get(listener.upper(), {})
        if name == "sasl.plain.users":
            prefixed = {
                k[len(PLAIN_USERS_PREFIX) :]: str(v)
                for k, v in overrides.items()
                if k.startswith(PLAIN_USERS_PREFIX)
            }
            return prefixed or self.sasl_plain_users
        if name in overrides:
            return overrides[name]
        return getattr(self, name.replace(".", "_"))

    @property
    def rack_aware_reads(self) -> bool:
        """Whether a consumer's fetch is pointed at an in-sync replica in its rack."""
        return REPLICA_SELECTORS[self.replica_selector_class]

    @property
    def all_log_dirs(self) -> tuple[Path, ...]:
        """`log.dirs`, or the one data directory. Metadata lives in the first."""
        return self.log_dirs or (self.data_dir,)

    @property
    def disk_throttle(self) -> DiskThrottleSettings:
        return DiskThrottleSettings(
            self.disk_throttle_enable, float(self.disk_throttle_util_threshold),
            float(self.disk_throttle_await_ms_threshold),
            self.disk_throttle_partition_bytes_per_second, self.disk_health_sample_interval_ms,
        )  # fmt: skip

    @property
    def advertised(self) -> tuple[str, int]:
        """The address the first listener advertises."""
        return self.endpoints[0].advertised

    @classmethod
    def load(cls, path: Path | None = None, **overrides: Any) -> BrokerConfig:
        settings: dict[str, Any] = {}
        if path is not None:
            settings.update(_flatten(tomllib.loads(path.read_text(encoding="utf-8"))))
        given = {k: v for k, v in overrides.items() if v is not None}
        if "data_dir" in given:
            given["log_dirs"] = ()
        if "listen_host" in given:  # --listen HOST:PORT: one PLAINTEXT listener there
            given["listeners"] = None
        flagged = {FLAG_SETTINGS[k] for k in given if k in FLAG_SETTINGS}
        config = cls.from_settings(settings, **given)
        return replace(config, explicit=config.explicit | flagged)

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], **overrides: Any) -> BrokerConfig:
        own = {f.name for f in fields(cls)}
        values: dict[str, Any] = {}
        topic: dict[str, str] = {}
        plain_users: dict[str, str] = {}
        listener_overrides: dict[str, dict[str, Any]] = {}
        scaled_first = sorted(settings.items(), key=lambda item: item[0] not in SCALED_SYNONYMS)
        for name, value in scaled_first:
            if name in BROKER_SYNONYMS:
                topic[BROKER_SYNONYMS[name]] = _config_text(value)
            elif name in SCALED_SYNONYMS:
                topic_name, factor = SCALED_SYNONYMS[name]
                topic[topic_name] = str(int(value) * factor)
            elif name in ("listeners", "listen"):
                values.update(_listeners_values(str(value)))
            elif name in ("advertised.listeners", "advertise"):
                values.update(_advertised_values(str(value)))
            elif name.startswith(PLAIN_USERS_PREFIX):
                plain_users[name[len(PLAIN_USERS_PREFIX) :]] = str(value)
            elif name.startswith(LISTENER_PREFIX):
                listener, sep, setting = name[len(LISTENER_PREFIX) :].partition(".")
                if not sep or not setting:
                    raise ValueError(f"{name!r} is not {LISTENER_PREFIX}<listener>.<setting>")
                listener_overrides.setdefault(listener.upper(), {})[setting] = value
            elif name in ("log.dirs", "log.dir"):
                values["log_dirs"] = _paths(value)
            elif name.replace(".", "_") in own:
                values[name.replace(".", "_")] = value
            else:
                raise ValueError(f"unknown broker setting {name!r}")
        if plain_users:
            values["sasl_plain_users"] = plain_users
        if listener_overrides:
            values["listener_overrides"] = listener_overrides
        config = cls(**values, explicit=frozenset(settings))
        if topic:
            config = replace(config, log_defaults=LogConfig.from_properties(topic))
        if "data_dir" in values:
            config = replace(config, data_dir=Path(values["data_dir"]))
        elif config.log_dirs:
            config = replace(config, data_dir=config.log_dirs[0])
        return replace(config, **overrides)

    def broker_configs(self) -> dict[str, str]:
        """Every broker setting weir has, by Kafka name, as DescribeConfigs shows it."""
        endpoints = self.endpoints
        out = {
            "node.id": str(self.node_id),
            "broker.id": str(self.node_id),
            "listeners": ",".join(str(listener) for listener in endpoints),
            "advertised.listeners": ",".join(
                f"{listener.name}://{_address(*listener.advertised)}" for listener in endpoints
            ),
            "log.dirs": ",".join(str(d) for d in self.all_log_dirs),
        }
        if self.rack:
            out["broker.rack"] = self.rack
        if self.zookeeper:
            out["zookeeper.connect"] = self.zookeeper
        for f in fields(self):
            if f.name not in _NOT_SETTINGS and getattr(self, f.name) is not None:
                out[f.name.replace("_", ".")] = _config_text(getattr(self, f.name))
        for definition in TOPIC_CONFIGS:
            if definition.broker_name:
                value = getattr(self.log_defaults, definition.field_name)
                out[definition.broker_name] = definition.text(value)
        return dict(sorted(out.items()))


def parse_host_port(text: str) -> tuple[str, int]:
    """`HOST:PORT` (an optional `PLAINTEXT://` prefix is allowed) -> (host, port)."""
    text = text.split("://", 1)[-1]
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def _listeners_values(text: str) -> dict[str, Any]:
    """`listeners`: the first listener's address, and the whole text when it names listeners
    (a bare `HOST:PORT` is the one PLAINTEXT listener, as it always was)."""
    _, host, port = parse_endpoint(text.split(",", 1)[0])
    values: dict[str, Any] = {"listen_host": host, "listen_port": port}
    if "://" in text or "," in text.strip(", "):
        values["listeners"] = text
    return values


def _advertised_values(text: str) -> dict[str, Any]:
    """`advertised.listeners`: a bare `HOST:PORT` is the first listener's; named entries are
    matched to listeners by name."""
    if "://" in text or "," in text.strip(", "):
        return {"advertised_listeners": text}
    _, host, port = parse_endpoint(text)
    return {"advertised_host": host, "advertised_port": port}


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flatten(value, name + "."))
        else:
            out[name] = value
    return out


def _paths(value: Any) -> tuple[Path, ...]:
    items = value if isinstance(value, list) else str(value).split(",")
    paths = tuple(Path(str(item).strip()) for item in items if str(item).strip())
    if not paths:
        raise ValueError("log.dirs names no directory")
    return paths


def _config_text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)
