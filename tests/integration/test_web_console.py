"""`weir console` against a real broker, read in headless Chromium (Playwright for Python), as an
operator would: every page loads with no console or script error; the topic list shows the
test's topic; the group page shows the group's lag and its Burrow status; the message browser
finds a message by offset and by timestamp; the audit page says it has no data until `__audit`
holds some, then (a broker with audit on) names who reads and who writes; a throughput chart
draws the traffic sampled; unknown topics and groups are 404 pages and a cluster that is not
there a 502 page, and the console keeps serving. Screenshots of the pages are saved as test
artefacts."""

from __future__ import annotations

import datetime
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess, weir
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from console_browser import ConsoleProcess, chromium, screenshot, watch
from waiting import poll

TOPIC = "console-orders"
GROUP = "console-readers"
TRAFFIC = "console-traffic"
#: records on partition 0, a minute apart from BASE; the group commits COMMITTED of them
RECORDS, COMMITTED = 10, 4
BASE_MS = (int(time.time()) - 3600) * 1000
BINARY_OFFSET = 3
TIMEOUT = 30
PAGES = {
    "cluster": "/",
    "topics": "/topics",
    "topic": f"/topics/{TOPIC}",
    "groups": "/groups",
    "group": f"/groups/{GROUP}",
    "messages": f"/messages?topic={TOPIC}&partition=0&offset=0&limit=10",
}


def stamp(offset: int) -> int:
    return BASE_MS + offset * 60_000


def value(offset: int) -> bytes:
    return b"\x00\x01binary\xff" if offset == BINARY_OFFSET else f"order-{offset} paid".encode()


def shown_time(ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}Z"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("console") / "broker")
    process.start()
    for topic in (TOPIC, TRAFFIC):
        created = weir("topic", "create", topic, "--partitions", "2", "--bootstrap-server",
                       process.bootstrap)  # fmt: skip
        assert created.returncode == 0, created.stderr
    producer = Producer({"bootstrap.servers": process.bootstrap, "log_level": 0})
    for offset in range(RECORDS):
        producer.produce(TOPIC, value(offset), key=f"k{offset}".encode(), partition=0,
                         timestamp=stamp(offset), headers=[("source", b"test")])  # fmt: skip
    for offset in range(3):
        producer.produce(TOPIC, b"other-%d" % offset, partition=1)
    assert producer.flush(TIMEOUT) == 0
    yield process
    if process.process is not None:
        process.stop()


@pytest.fixture(scope="module")
def group_member(broker: BrokerProcess) -> Iterator[Consumer]:
    """A member of GROUP that holds both partitions and has committed partition 0 part of the
    way (lag RECORDS - COMMITTED) and partition 1 to its end (lag 0)."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP,
                         "client.id": "orders-reader", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "log_level": 0})  # fmt: skip
    consumer.subscribe([TOPIC])

    def assigned() -> bool:
        consumer.poll(0.2)
        return len(consumer.assignment()) == 2

    poll(assigned, TIMEOUT, "both partitions assigned to the group's member")
    committed = [KafkaTopicPartition(TOPIC, 0, COMMITTED), KafkaTopicPartition(TOPIC, 1, 3)]
    consumer.commit(offsets=committed, asynchronous=False)
    yield consumer
    consumer.close()


@pytest.fixture(scope="module")
def console(broker: BrokerProcess, group_member: Consumer, tmp_path_factory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("console-log") / "console.log"
    process = ConsoleProcess(broker.bootstrap, "--sample-interval", "1", "--refresh", "0", log=log)
    yield process.url
    process.stop()
    assert "Traceback" not in process.logs(), process.logs()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as browser:
        yield browser


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    yield context.new_page()
    context.close()


@pytest.fixture
def problems(page: Any) -> list[str]:
    """The page's console and script errors during the test."""
    return watch(page)


def visit(page: Any, url: str) -> Any:
    response = page.goto(url)
    assert response is not None and response.status == 200, (url, response and response.status)
    return response


def test_every_page_loads_with_no_errors(console: str, page: Any, problems: list[str]) -> None:
    for name, path in PAGES.items():
        visit(page, console + path)
        page.wait_for_load_state("load")
        screenshot(page, f"console-{name}")
    assert problems == []
    visit(page, console + "/")
    assert page.locator("#brokers tbody tr").count() == 1
    assert "controller" in page.locator("#brokers").inner_text()


def test_the_topic_list_shows_the_topic(console: str, page: Any, problems: list[str]) -> None:
    visit(page, console + "/topics")
    page.locator("#topics").get_by_role("link", name=TOPIC, exact=True).click()
    page.wait_for_url(f"**/topics/{TOPIC}")
    rows = page.locator("#partitions tbody tr")
    assert rows.count() == 2
    first = rows.nth(0).locator("td").all_inner_texts()
    assert first[0] == "0" and first[4:7] == ["0", str(RECORDS), str(RECORDS)]
    assert problems == []


def test_the_group_page_shows_its_lag_and_status(
    console: str, page: Any, problems: list[str]
) -> None:
    def status() -> str | None:
        visit(page, console + f"/groups/{GROUP}")
        text = page.locator(".facts .status").inner_text()
        return None if "first sample" in text else text

    # partition 0 has lag and no commit since the first sample: STOP, so the group is ERROR
    assert poll(status, TIMEOUT, "the group's status") == "ERROR"
    assert page.locator("#total-lag").inner_text() == str(RECORDS - COMMITTED)
    rows = [row.locator("td").all_inner_texts() for row in page.locator("#lag tbody tr").all()]
    lag = {cells[1]: cells for cells in rows}
    assert lag["0"][2:6] == [str(COMMITTED), str(RECORDS), str(RECORDS - COMMITTED), "STOP"]
    assert lag["1"][4:6] == ["0", "OK"]
    assert lag["0"][6] == "orders-reader"
    assert "orders-reader" in page.locator("#members").inner_text()
    screenshot(page, "console-group")

    visit(page, console + "/groups")
    row = page.locator("#groups tbody tr", has_text=GROUP).locator("td").all_inner_texts()
    assert row[4:6] == [str(RECORDS - COMMITTED), "ERROR"]
    assert problems == []


def browse_with_form(page: Any, console: str, **fields: str) -> list[list[str]]:
    visit(page, console + "/messages")
    form = page.locator("#browse")
    for name, text in {"topic": TOPIC, "partition": "0", **fields}.items():
        form.locator(f"input[name={name}]").fill(text)
    form.get_by_role("button", name="Show").click()
    page.wait_for_load_state("load")
    return [row.locator("td").all_inner_texts() for row in page.locator("#records tbody tr").all()]


def test_the_message_browser_finds_a_message_by_offset(
    console: str, page: Any, problems: list[str]
) -> None:
    [record] = browse_with_form(page, console, offset="7", limit="1")
    assert record[:4] == ["7", shown_time(stamp(7)), "k7", "order-7 paid"]
    assert record[4] == "source: test"
    [binary] = browse_with_form(page, console, offset=str(BINARY_OFFSET), limit="1")
    assert binary[3] == "00 01 62 69 6e 61 72 79 ff"
    assert problems == []


def test_the_message_browser_finds_a_message_by_timestamp(
    console: str, page: Any, problems: list[str]
) -> None:
    between = datetime.datetime.fromtimestamp((stamp(5) - 30_000) / 1000, tz=datetime.UTC)
    records = browse_with_form(page, console, timestamp=between.isoformat(), limit="2")
    assert [r[0] for r in records] == ["5", "6"]
    assert records[0][1] == shown_time(stamp(5)) and records[0][3] == "order-5 paid"
    screenshot(page, "console-messages-by-time")
    after = browse_with_form(page, console, timestamp=str(stamp(RECORDS) + 1))
    assert after == [] and "no message at or after" in page.locator(".where").inner_text()
    assert problems == []


def test_the_audit_page_without_audit_data(console: str, page: Any, problems: list[str]) -> None:
    visit(page, console + "/audit")
    assert "Audit has no data yet" in page.locator("#audit-empty").inner_text()
    assert problems == []


def test_the_audit_page_names_who_reads_and_writes(
    tmp_path: Path, page: Any, problems: list[str]
) -> None:
    """A broker with audit on (written every 300 ms); one client writes, another reads: the
    page names each with the records it wrote or read."""
    audited = BrokerProcess(tmp_path / "audited",
                            config={"audit.enable": True, "audit.flush.interval.ms": 300})
    audited.start()
    process = None
    try:
        created = weir("topic", "create", TOPIC, "--partitions", "1", "--bootstrap-server",
                       audited.bootstrap)  # fmt: skip
        assert created.returncode == 0, created.stderr
        producer = Producer({"bootstrap.servers": audited.bootstrap, "client.id": "orders-writer",
                             "log_level": 0})  # fmt: skip
        for i in range(50):
            producer.produce(TOPIC, b"order-%d" % i)
        assert producer.flush(TIMEOUT) == 0
        reader = Consumer({"bootstrap.servers": audited.bootstrap, "group.id": "audit-readers",
                           "client.id": "orders-reader", "auto.offset.reset": "earliest",
                           "log_level": 0})  # fmt: skip
        reader.subscribe([TOPIC])
        seen = 0
        for _ in range(200):
            message = reader.poll(0.5)
            if message is not None and message.error() is None:
                seen += 1
            if seen == 50:
                break
        reader.close()
        assert seen == 50
        process = ConsoleProcess(audited.bootstrap, "--refresh", "0",
                                 log=tmp_path / "console.log")  # fmt: skip

        def named() -> list[list[str]] | None:
            visit(page, process.url + "/audit")
            rows = [r.locator("td").all_inner_texts()
                    for r in page.locator(f"#audit-{TOPIC} tbody tr").all()]  # fmt: skip
            found = sorted([r[0], r[1], r[5]] for r in rows)
            wanted = [["reads", "orders-reader", "50"], ["writes", "orders-writer", "50"]]
            return found if found == wanted else None

        poll(named, TIMEOUT, "the audit page naming the writer and the reader")
        screenshot(page, "console-audit")
        assert problems == []
    finally:
        if process is not None:
            process.stop()
        audited.stop()


def test_a_throughput_chart_draws_the_sampled_traffic(
    broker: BrokerProcess, console: str, page: Any, problems: list[str]
) -> None:
    stop = threading.Event()

    def produce() -> None:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0})
        for i in range(400):  # bounded: about eight seconds
            if stop.is_set():
                break
            producer.produce(TRAFFIC, b"click-%d" % i)
            producer.flush(TIMEOUT)
            time.sleep(0.02)

    writer = threading.Thread(target=produce, daemon=True)
    writer.start()
    try:

        def drawn() -> bool:
            visit(page, console + f"/topics/{TRAFFIC}")
            return page.locator("svg.chart polyline.series").count() == 1

        poll(drawn, TIMEOUT, "a throughput line")
        time.sleep(3)  # a few more samples for the picture
        visit(page, console + f"/topics/{TRAFFIC}")
        screenshot(page, "console-topic-traffic")
    finally:
        stop.set()
        writer.join(TIMEOUT)
    visit(page, console + "/topics")
    assert page.locator("#topics tr", has_text=TRAFFIC).locator("svg.spark polyline").count() == 1
    assert problems == []


def status_and_text(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_unknown_topics_and_groups_are_404_pages(console: str) -> None:
    assert status_and_text(console + "/topics/no-such-topic")[0] == 404
    status, text = status_and_text(console + "/groups/no-such-group")
    assert status == 404 and "no consumer group &#x27;no-such-group&#x27;" in text
    status, text = status_and_text(console + "/messages?topic=no-such-topic&offset=0")
    assert status == 404 and "no topic" in text and 'id="browse"' in text
    assert status_and_text(console + "/messages?topic=x&offset=a")[0] == 400
    assert status_and_text(console + "/nowhere")[0] == 404
    assert status_and_text(console + "/")[0] == 200


def test_a_cluster_that_is_not_there_is_a_502_page(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        nowhere = f"127.0.0.1:{sock.getsockname()[1]}"
    process = ConsoleProcess(nowhere, log=tmp_path / "console.log")
    try:
        for path in ("/", "/topics", "/groups/any"):
            status, text = status_and_text(process.url + path)
            assert status == 502 and f"cannot reach the cluster at {nowhere}" in text, text
        assert process.process.poll() is None
    finally:
        process.stop()
    assert "Traceback" not in process.logs(), process.logs()
