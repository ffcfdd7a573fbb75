"""The records of the internal topic `__audit`: who read and wrote what, per minute.

Each record counts one client's traffic on one partition through one broker in one minute: the
bytes and records of its Produce requests appended there (api "Produce"), or of the record
batches its Fetch requests were sent (api "Fetch"). Brokers write them
(`weir.broker.audit`); `weir audit who-reads|who-writes` (`weir.cluster.audit_log`) and the
pipeline (`weir.pipeline.audit_table`) read them. `AuditEntry` declares the fields once; the key,
the value and the warehouse's columns are derived from it.

Key: a JSON array of the key fields in their declared order (`KEY_FIELDS`), compact and ASCII,
so the same counts always have the same key bytes. A broker writes the running counts of the
current minute again at every flush; compaction keeps the last, and a reader taking the latest
value per key (or the largest: counts only grow) gets each minute's counts once.
`broker_started_ms` keeps a restarted broker from overwriting what it wrote in the same minute
before its restart.

Value: a JSON object of every field, the key's included, so a reader needs only the value.
Times are milliseconds since the epoch, UTC; `minute_ms` is the start of the minute.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any

AUDIT_TOPIC = "__audit"
PRODUCE = "Produce"
FETCH = "Fetch"
MINUTE_MS = 60_000


class AuditRecordError(ValueError):
    """A record of `__audit` that is not an audit entry."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditEntry:
    minute_ms: int
    broker: int
    #: when the broker process that counted this started: its counts never overwrite those of
    #: an earlier process of the same broker
    broker_started_ms: int
    #: the authenticated principal, Kafka's form: `User:alice`, `User:ANONYMOUS`
    principal: str
    client_id: str
    #: the client's IP address as the broker saw it
    address: str
    api: str
    topic: str
    partition: int
    bytes: int
    records: int


#: every field and its type, in declared order
FIELD_TYPES: dict[str, type] = {f.name: int if f.type == "int" else str for f in fields(AuditEntry)}
#: the fields that are counted; the others identify a count and make the key
COUNT_FIELDS = ("bytes", "records")
KEY_FIELDS = tuple(name for name in FIELD_TYPES if name not in COUNT_FIELDS)


def minute_of(milliseconds: int) -> int:
    """The start of the minute `milliseconds` falls in."""
    return milliseconds - milliseconds % MINUTE_MS


def encode_key(entry: AuditEntry) -> bytes:
    return _compact([getattr(entry, name) for name in KEY_FIELDS])


def encode_value(entry: AuditEntry) -> bytes:
    return _compact(asdict(entry))


def decode_value(value: bytes | None) -> AuditEntry:
    """The entry a record's value holds; AuditRecordError if it holds none."""
    if value is None:
        raise AuditRecordError("no value")
    try:
        document = json.loads(value)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AuditRecordError(f"not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise AuditRecordError("not a JSON object")
    return AuditEntry(**{name: _field(document, name, kind) for name, kind in FIELD_TYPES.items()})


def _field(document: dict[str, Any], name: str, kind: type) -> Any:
    value = document.get(name)
    if type(value) is not kind:  # bool is an int subclass: exact types only
        raise AuditRecordError(f"{name}: expected {kind.__name__}, got {value!r}")
    return value


def _compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=True).encode()
