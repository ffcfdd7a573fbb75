"""What each of the console's URLs reads and shows: a table of routes, and one method per page
that asks `reader`, `history`, `browse` or `audit` and hands the answers to a renderer.

  /                  the cluster: id, controller, brokers with racks, leaders, disks
  /topics            every topic: partitions, RF, under-replicated, size, throughput
  /topics/NAME       one topic: partitions with leader, replicas, ISR, offsets, sizes; chart
  /groups            every consumer group: state, members, total lag, status
  /groups/NAME       one group: lag per partition with status, chart, members
  /messages?...      the message browser (topic, partition, offset or timestamp, limit)
  /audit             who reads and writes each topic (`__audit`)

Failures come back as `weir.ops.console.errors` exceptions for `server` to show, except on the
message browser, which shows a wrong field or unknown topic next to the form it came from.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from urllib.parse import unquote

from weir.clock import Clock, SystemClock
from weir.ops.console import audit
from weir.ops.console.browse import Browse, Page, browse
from weir.ops.console.cluster_pages import (
    TopicRow,
    cluster_page,
    replica_sizes,
    topic_page,
    topic_size,
    topics_page,
)
from weir.ops.console.errors import BadRequest, ConsoleError, NotFound
from weir.ops.console.group_pages import GroupRow, group_page, groups_page
from weir.ops.console.history import History
from weir.ops.console.html import Html, join, tag
from weir.ops.console.message_pages import BrowseForm, audit_page, messages_page
from weir.ops.console.reader import ClientSettings, ClusterReader


@dataclass(frozen=True, slots=True)
class Rendered:
    """A page's body with its status, title and navigation entry; `live` pages reload on the
    console's refresh period."""

    title: str
    active: str
    body: Html
    status: HTTPStatus = HTTPStatus.OK
    live: bool = True


class Console:
    """The pages, over one reader and one history shared by every request thread. `browser`
    and `audit_reader` are the message browser and the audit reader (replaceable in tests)."""

    def __init__(
        self,
        reader: ClusterReader,
        history: History,
        *,
        clock: Clock | None = None,
        browser: Callable[[ClientSettings, Browse], Page] = browse,
        audit_reader: Callable[[ClientSettings], audit.AuditRead | None] = (
            audit.read_audit_records
        ),
    ) -> None:
        self.reader = reader
        self.history = history
        self._clock = clock or SystemClock()
        self._browser = browser
        self._audit_reader = audit_reader
        #: (path pattern, page); the pattern's named groups are the page's arguments
        self._routes: tuple[tuple[re.Pattern[str], Callable[..., Rendered]], ...] = (
            (re.compile(r"/"), self.cluster),
            (re.compile(r"/topics/?"), self.topics),
            (re.compile(r"/topics/(?P<name>[^/]+)"), self.topic),
            (re.compile(r"/groups/?"), self.groups),
            (re.compile(r"/groups/(?P<name>[^/]+)"), self.group),
            (re.compile(r"/audit/?"), self.audit),
        )

    def render(self, path: str, query: Mapping[str, str]) -> Rendered:
        """The page at `path`; ConsoleError when it cannot be shown."""
        if re.fullmatch(r"/messages/?", path):
            return self.messages(query)
        for pattern, page in self._routes:
            match = pattern.fullmatch(path)
            if match is not None:
                return page(**{k: unquote(v) for k, v in match.groupdict().items()})
        raise NotFound(f"no page at {path}")

    def cluster(self) -> Rendered:
        cluster = self.reader.cluster()
        topics = self.reader.topics()
        log_dirs = self.reader.log_dirs(cluster.brokers)
        return Rendered("Cluster", "cluster", cluster_page(cluster, topics, log_dirs))

    def topics(self) -> Rendered:
        topics = self.reader.topics()
        sizes = replica_sizes(self.reader.log_dirs(self.reader.cluster().brokers))
        rows = [TopicRow(t, topic_size(t, sizes), self.history.throughput(t.name)) for t in topics]
        return Rendered("Topics", "topics", topics_page(rows))

    def topic(self, name: str) -> Rendered:
        topic = self.reader.topic(name)
        offsets = self.reader.log_offsets((name, p.index) for p in topic.partitions)
        sizes = replica_sizes(self.reader.log_dirs(self.reader.cluster().brokers, topic))
        body = topic_page(topic, offsets, sizes, self.reader.topic_overrides(name),
                          self.history.throughput(name))  # fmt: skip
        return Rendered(f"Topic {name}", "topics", body)

    def groups(self) -> Rendered:
        names = [g.group_id for g in self.reader.group_listings()]
        described = self.reader.describe_groups(names)
        offsets = self.reader.group_offsets(names)
        now = self._clock.milliseconds()
        rows = [GroupRow(n, described[n].state, len(described[n].members), offsets.get(n, {}),
                         self.history.group_status(n, now)) for n in names]  # fmt: skip
        return Rendered("Consumer groups", "groups", groups_page(rows))

    def group(self, name: str) -> Rendered:
        group = self.reader.group(name)
        offsets = self.reader.group_offsets([name])[name]
        now = self._clock.milliseconds()
        body = group_page(group, offsets, self.history.group_status(name, now),
                          self.history.statuses(name, now), self.history.lag(name))  # fmt: skip
        return Rendered(f"Group {name}", "groups", body)

    def messages(self, query: Mapping[str, str]) -> Rendered:
        form = BrowseForm.of(query)
        topics = [t.name for t in self.reader.topics()]
        try:
            found = self._browse(form) if form.topic else None
        except (BadRequest, NotFound) as exc:
            body = join([tag("p", str(exc), class_="error", role="alert"),
                         messages_page(form, topics, None)])  # fmt: skip
            return Rendered("Messages", "messages", body, exc.status, live=False)
        return Rendered("Messages", "messages", messages_page(form, topics, found), live=False)

    def _browse(self, form: BrowseForm) -> Page:
        request = form.request()
        self.reader.topic(request.topic).partition(request.partition)
        return self._browser(self.reader.settings, request)

    def audit(self) -> Rendered:
        read = self._audit_reader(self.reader.settings)
        by_topic = audit.who_reads_and_writes(read.records) if read is not None else {}
        return Rendered("Audit: who reads and writes", "audit", audit_page(read, by_topic))


def error_page(error: ConsoleError) -> Rendered:
    titles = {HTTPStatus.NOT_FOUND: "Not found", HTTPStatus.BAD_REQUEST: "Bad request",
              HTTPStatus.FORBIDDEN: "Not authorized",
              HTTPStatus.BAD_GATEWAY: "Cluster not answering"}  # fmt: skip
    title = titles.get(error.status, "Console error")
    body = tag("p", str(error), class_="error", role="alert", id="error")
    return Rendered(title, "", body, error.status, live=error.status == HTTPStatus.BAD_GATEWAY)
