"""The console's page renderers on plain data: what an operator reads on each page, forms that
refuse what they cannot use, and values from the cluster that never become markup."""

from __future__ import annotations

import pytest

from weir.cluster.consumer_lag import GroupStatus, PartitionStatus
from weir.ops.console.audit import AuditRead
from weir.ops.console.browse import Browse, Page, Record
from weir.ops.console.cluster_pages import TopicRow, cluster_page, topic_page, topics_page
from weir.ops.console.errors import BadRequest
from weir.ops.console.group_pages import GroupRow, group_page, groups_page
from weir.ops.console.message_pages import BrowseForm, audit_page, messages_page, parse_timestamp
from weir.ops.console.reader import (
    Broker,
    BrokerLogDirs,
    ClusterView,
    GroupView,
    LogDir,
    LogOffsets,
    MemberView,
    PartitionView,
    TopicView,
)

T0 = 1_764_316_800_000  # 2025-11-28 08:00:00 UTC
ORDERS = TopicView("orders", (PartitionView(0, 1, (1, 2), (1, 2)),
                              PartitionView(1, 2, (2, 3), (2,)),
                              PartitionView(2, -1, (3, 1), ())))  # fmt: skip


def test_the_cluster_page_names_brokers_racks_and_the_controller():
    cluster = ClusterView("c-1", 2, (Broker(1, "h1", 9092, "a"), Broker(2, "h2", 9092, "b"),
                                     Broker(3, "h3", 9092, None)))  # fmt: skip
    dirs = [BrokerLogDirs(1, (LogDir("/d1", None, 100 * 2**30, 40 * 2**30),),
                          {("orders", 0): 2048})]  # fmt: skip
    body = cluster_page(cluster, [ORDERS], dirs)
    assert "c-1" in body and "broker 2" in body
    assert "<td>controller</td>" in body
    assert "/d1: 40.0 GiB free of 100.0 GiB" in body and "2.0 KiB" in body
    assert "not reachable" in body  # brokers 2 and 3 did not describe their log dirs


def test_the_topic_list_counts_under_replicated_and_offline_partitions():
    internal = TopicView("__consumer_offsets", (PartitionView(0, 1, (1,), (1,)),))
    body = topics_page([TopicRow(internal, None, []), TopicRow(ORDERS, 3000, [(T0, 2.5)])])
    assert body.index("orders") < body.index("__consumer_offsets")  # internal topics last
    assert 'href="/topics/orders"' in body and "2.9 KiB" in body and ">2.5<" in body
    assert '<td class="num bad">2</td>' in body  # under-replicated: partitions 1 and 2
    assert '<td class="num bad">1</td>' in body  # offline: partition 2


def test_the_topic_page_shows_offsets_sizes_and_replicas_out_of_sync():
    offsets = {("orders", 0): LogOffsets(0, 10), ("orders", 1): LogOffsets(5, 7)}
    sizes = {("orders", 0): {1: 1000, 2: 990}, ("orders", 1): {2: 200}}
    body = topic_page(ORDERS, offsets, sizes, {"cleanup.policy": "compact"}, [])
    assert "cleanup.policy=compact" in body and "collecting samples" in body
    assert "<td>1,2</td>" in body and "<td>2<span" in body and "(out: 3)" in body
    assert "<td>-<span" in body and "(out: 3,1)" in body  # no ISR at all
    assert "1000 B" in body
    assert 'href="/messages?topic=orders&amp;partition=1"' in body


def test_the_group_pages_show_lag_and_status():
    row = GroupRow("readers", "Stable", 1, {("orders", 0): (4, 10), ("orders", 1): (7, 7)},
                   GroupStatus.ERROR)  # fmt: skip
    listing = groups_page([row, GroupRow("new", "Empty", 0, {}, None)])
    assert '<td class="num">6</td>' in listing and "status-error" in listing
    assert "after the first sample" in listing

    member = MemberView("m-1", "app-1", "/127.0.0.1", None, (("orders", 0),))
    group = GroupView("readers", "Stable", "range", 1, (member,))
    body = group_page(group, row.offsets, GroupStatus.ERROR,
                      {("orders", 0): PartitionStatus.STOP, ("orders", 1): PartitionStatus.OK},
                      {"total": [(T0, 6), (T0 + 1000, 6)]})  # fmt: skip
    assert '<span id="total-lag">6</span>' in body
    assert "STOP" in body and "app-1" in body and "orders-0" in body
    assert "offset=4" in body  # browse from the committed offset


def test_a_browse_form_asks_for_an_offset_or_a_timestamp():
    form = BrowseForm.of({"topic": " orders ", "partition": "1", "offset": "5", "limit": "3"})
    assert form.request() == Browse("orders", 1, offset=5, limit=3)
    by_time = BrowseForm.of({"topic": "orders", "timestamp": "2025-11-28T08:00:00Z"})
    assert by_time.request().timestamp_ms == T0 and by_time.request().offset is None
    latest = BrowseForm.of({"topic": "orders"}).request()
    assert (latest.offset, latest.timestamp_ms, latest.limit) == (None, None, 20)


@pytest.mark.parametrize(
    ("query", "complaint"),
    [({"offset": "x"}, "offset must be a whole number"), ({"offset": "-1"}, "at least 0"),
     ({"limit": "0"}, "between 1 and 500"), ({"offset": "1", "timestamp": "5"}, "not both"),
     ({"timestamp": "yesterday"}, "neither ISO 8601")],
)  # fmt: skip
def test_a_browse_form_refuses_what_it_cannot_use(query: dict[str, str], complaint: str):
    with pytest.raises(BadRequest, match=complaint):
        BrowseForm.of({"topic": "orders", **query}).request()


def test_timestamps_in_iso_8601_or_epoch_milliseconds():
    assert parse_timestamp(str(T0)) == T0
    assert parse_timestamp("2025-11-28T08:00:00") == T0  # UTC without a zone
    assert parse_timestamp("2025-11-28T09:00:00+01:00") == T0
    assert parse_timestamp("2025-11-28 08:00:00.250Z") == T0 + 250


def test_the_message_browser_shows_records_and_pages_on():
    records = (Record(5, T0, b"k5", b"order-5", (("trace", b"\x01\x02"),)),
               Record(6, None, None, b"\xff\x00", ()))  # fmt: skip
    form = BrowseForm.of({"topic": "orders", "partition": "0", "offset": "5", "limit": "2"})
    body = messages_page(form, ["orders"], Page(records, 5, 0, 10))
    assert "offsets 5 to 6" in body and "order-5" in body and "2025-11-28 08:00:00.000Z" in body
    assert '<span class="value hex">ff 00</span>' in body
    assert '<span class="value hex">01 02</span>' in body
    assert '<span class="value null">null</span>' in body
    assert "offset=3" in body and "offset=7" in body  # older and newer


def test_a_timestamp_after_every_record_finds_nothing():
    form = BrowseForm.of({"topic": "orders", "timestamp": str(T0)})
    assert "no message at or after 2025-11-28 08:00:00.000Z" in messages_page(
        form, [], Page((), None, 0, 10))  # fmt: skip


def test_record_contents_never_become_markup():
    hostile = Record(0, T0, b"<script>", b'"><img src=x onerror=alert(1)>', (("<h>", b"<v>"),))
    body = messages_page(BrowseForm.of({"topic": "t"}), ["<t>"], Page((hostile,), 0, 0, 1))
    assert "<script>" not in body and "<img" not in body and "<h>" not in body
    assert "<t>" not in body


def test_the_audit_page_without_data():
    assert "Audit has no data yet" in audit_page(None, {})
    assert "holds no produce or fetch records" in audit_page(AuditRead((), 0), {})
