"""The message browser and audit pages: pure renderers."""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from weir.ops.console.audit import AUDIT_TOPIC, WRITES, Access, AuditRead
from weir.ops.console.browse import DEFAULT_LIMIT, MAX_LIMIT, Browse, Page, Record
from weir.ops.console.errors import BadRequest
from weir.ops.console.html import (
    MISSING,
    Html,
    esc,
    human_bytes,
    join,
    link,
    messages_href,
    num,
    section,
    shown_html,
    table,
    tag,
    timestamp,
    topic_href,
    void,
)


@dataclass(frozen=True, slots=True)
class BrowseForm:
    """The browser's form as the reader filled it in (text, as typed)."""

    topic: str = ""
    partition: str = "0"
    offset: str = ""
    timestamp: str = ""
    limit: str = str(DEFAULT_LIMIT)

    @classmethod
    def of(cls, query: Mapping[str, str]) -> BrowseForm:
        return cls(**{k: query[k].strip() for k in cls.__dataclass_fields__ if k in query})

    def request(self) -> Browse:
        """The browse the form asks for; BadRequest naming the field that is wrong."""
        if self.offset and self.timestamp:
            raise BadRequest("give an offset or a timestamp, not both")
        return Browse(
            topic=self.topic,
            partition=_integer("partition", self.partition, 0),
            offset=_integer("offset", self.offset, 0) if self.offset else None,
            timestamp_ms=parse_timestamp(self.timestamp) if self.timestamp else None,
            limit=_integer("number of messages", self.limit, 1, MAX_LIMIT),
        )


def _integer(name: str, text: str, low: int, high: int | None = None) -> int:
    try:
        value = int(text)
    except ValueError:
        raise BadRequest(f"the {name} must be a whole number, not {text!r}") from None
    if value < low or (high is not None and value > high):
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise BadRequest(f"the {name} must be {bounds}")
    return value


def parse_timestamp(text: str) -> int:
    """Milliseconds since the epoch from a number of them, or from ISO 8601
    (2026-11-28T08:00:00Z; UTC when no zone is given)."""
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise BadRequest(f"{text!r} is neither ISO 8601 (2026-11-28T08:00:00Z) nor epoch "
                         "milliseconds") from None  # fmt: skip
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)


def messages_page(form: BrowseForm, topics: Sequence[str], found: Page | None) -> Html:
    parts = [_form(form, topics)]
    if found is not None:
        parts.append(_results(form.request(), found))
    return join(parts)


def _form(form: BrowseForm, topics: Sequence[str]) -> Html:
    def field(label: str, name: str, value: str, **extra: object) -> Html:
        entry = void("input", name=name, value=value, **extra)
        return tag("label", join([tag("span", label), entry]))

    options = join(tag("option", "", value=t) for t in topics)
    return tag("form", join([
        field("topic", "topic", form.topic, list="topic-names", required="required"),
        tag("datalist", options, id="topic-names"),
        field("partition", "partition", form.partition, type="number", min="0"),
        field("from offset", "offset", form.offset, type="number", min="0",
              placeholder="latest"),
        field("or from time", "timestamp", form.timestamp,
              placeholder="2026-11-28T08:00:00Z or epoch ms"),
        field("messages", "limit", form.limit, type="number", min="1", max=str(MAX_LIMIT)),
        tag("button", "Show", type="submit"),
    ]), method="get", action="/messages", class_="browse", id="browse")  # fmt: skip


def _results(request: Browse, found: Page) -> Html:
    where = (f"{request.topic}-{request.partition}: log start {found.log_start}, "
             f"log end {found.log_end}")  # fmt: skip
    if found.start is None:
        note = f"no message at or after {timestamp(request.timestamp_ms)}"
    elif not found.records:
        note = f"no messages from offset {found.start}"
    else:
        note = f"offsets {found.records[0].offset} to {found.records[-1].offset}"
        if request.timestamp_ms is not None:
            note += f", from the first message at or after {timestamp(request.timestamp_ms)}"
    rows = [_record_row(r) for r in found.records]
    records = table(("OFFSET", "TIMESTAMP", "KEY", "VALUE", "HEADERS"), rows,
                    empty="no messages", id_="records")  # fmt: skip
    return section("Messages", tag("p", join([link(topic_href(request.topic), where), "; ",
                                              note]), class_="where"),
                   records, _paging(request, found))  # fmt: skip


def _record_row(record: Record) -> list[object]:
    headers = join((tag("div", join([tag("b", name), ": ", shown_html(value)]))
                    for name, value in record.headers), "")  # fmt: skip
    return [num(record.offset), timestamp(record.timestamp_ms), shown_html(record.key),
            shown_html(record.value), headers or MISSING]  # fmt: skip


def _paging(request: Browse, found: Page) -> Html:
    if not found.records:
        return Html("")
    first, last = found.records[0].offset, found.records[-1].offset
    links = []
    if first > found.log_start:
        older = max(found.log_start, first - request.limit)
        links.append(link(messages_href(request.topic, request.partition, offset=older,
                                        limit=request.limit), "← older"))  # fmt: skip
    if last + 1 < found.log_end:
        links.append(link(messages_href(request.topic, request.partition, offset=last + 1,
                                        limit=request.limit), "newer →"))  # fmt: skip
    return tag("p", join(links, " "), class_="paging")


# ---- audit -------------------------------------------------------------------------------------


def audit_page(read: AuditRead | None, by_topic: Mapping[str, Sequence[Access]]) -> Html:
    if read is None or not by_topic:
        why = f"the topic {AUDIT_TOPIC} does not exist" if read is None else (
            f"{AUDIT_TOPIC} holds no produce or fetch records")  # fmt: skip
        return tag("p", f"Audit has no data yet: {why}. Brokers write it as clients produce "
                        "and fetch.", class_="empty", id="audit-empty")  # fmt: skip
    parts = [
        tag(
            "p",
            f"{len(read.records)} audit records read from {AUDIT_TOPIC}"
            + (f"; {read.unreadable} could not be read" if read.unreadable else ""),
        )
    ]
    parts += [section(topic, _accesses(topic, accesses)) for topic, accesses in by_topic.items()]
    return join(parts)


def _accesses(topic: str, accesses: Sequence[Access]) -> Html:
    rows = [(tag("span", "writes" if a.direction == WRITES else "reads",
                 class_=f"way {a.direction}"), a.client_id, a.principal or MISSING,
             ", ".join(a.addresses) or MISSING, num(human_bytes(a.bytes)), num(a.records),
             esc(_minute(a.first_minute)), esc(_minute(a.last_minute)))
            for a in accesses]  # fmt: skip
    return table(("", "CLIENT ID", "PRINCIPAL", "ADDRESSES", "BYTES", "RECORDS", "FIRST MINUTE",
                  "LAST MINUTE"), rows, id_=f"audit-{topic}")  # fmt: skip


def _minute(minute: object) -> str:
    """An audited minute: epoch minutes, seconds or milliseconds as UTC, text as it is."""
    if isinstance(minute, int) and not isinstance(minute, bool) and minute > 0:
        ms = minute * 60_000 if minute < 10**9 else minute * 1000 if minute < 10**11 else minute
        return timestamp(ms)[:16] + "Z"
    return str(minute) if minute is not None else MISSING
