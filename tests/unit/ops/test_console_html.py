"""The console's markup helpers: escaping, record values shown as text or hex, sizes, times and
the page frame."""

from __future__ import annotations

from weir.ops.console.html import (
    Html,
    Shown,
    esc,
    human_bytes,
    page,
    show_bytes,
    shown_html,
    table,
    tag,
    timestamp,
)


def test_text_is_escaped_once_and_markup_is_left_alone():
    assert esc('<script>"&') == "&lt;script&gt;&quot;&amp;"
    assert esc(esc("<")) == "&lt;"
    assert esc(None) == "-"
    assert tag("td", "<x>", class_="num", data_refresh=5, title=None) == (
        '<td class="num" data-refresh="5">&lt;x&gt;</td>')  # fmt: skip
    assert tag("div", Html("<b>ok</b>")) == "<div><b>ok</b></div>"


def test_utf8_without_control_characters_is_text():
    assert show_bytes("order-7 ✓\tpaid\n".encode()) == Shown("text", "order-7 ✓\tpaid\n", 0)


def test_binary_values_are_hex():
    assert show_bytes(b"\x00\xffab") == Shown("hex", "00 ff 61 62", 0)
    assert show_bytes(b"abc\x01") == Shown("hex", "61 62 63 01", 0)
    assert show_bytes(b"\xc3\x28").kind == "hex"  # not UTF-8


def test_null_is_not_the_empty_string():
    assert show_bytes(None).kind == "null"
    assert show_bytes(b"") == Shown("text", "", 0)


def test_long_values_are_cut_and_say_how_much_is_left():
    assert show_bytes(b"a" * 1030) == Shown("text", "a" * 1024, 6)
    # a cut through a multi-byte character keeps the value text
    cut = show_bytes("é".encode() * 600)
    assert cut.kind == "text" and cut.text == "é" * 512 and cut.cut == 176
    assert "176 more bytes" in shown_html("é".encode() * 600)


def test_shown_values_cannot_become_markup():
    assert shown_html(b"<img src=x onerror=alert(1)>") == (
        '<span class="value text">&lt;img src=x onerror=alert(1)&gt;</span>')  # fmt: skip


def test_sizes_and_times():
    assert [human_bytes(n) for n in (None, 0, 1023, 1024, 5 * 1024**3)] == [
        "-", "0 B", "1023 B", "1.0 KiB", "5.0 GiB"]  # fmt: skip
    assert timestamp(1_764_316_800_123) == "2025-11-28 08:00:00.123Z"
    assert timestamp(-1) == "-"


def test_an_empty_table_says_why():
    assert table(("A",), [], empty="no topics yet") == '<p class="empty">no topics yet</p>'


def test_the_page_frame_loads_only_the_consoles_own_files():
    document = page("Topics", tag("p", "body"), active="topics", cluster="b:9092", refresh_s=10)
    assert document.startswith("<!doctype html>")
    assert '<a href="/topics" class="active">Topics</a>' in document
    assert 'data-refresh="10"' in document and 'id="refresh-toggle"' in document
    assert "http" not in document.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "refresh-toggle" not in page("M", "", active="messages", cluster="b:9092")
