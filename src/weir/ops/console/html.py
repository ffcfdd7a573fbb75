"""The console's markup: escaping, the page frame with its navigation, tables, links, and how
values are shown (sizes, times, record keys and values as text or hex).

Everything that comes from the cluster (names, keys, values, headers) is text until `esc`
makes it `Html`; an `Html` value is markup already and is never escaped again. The renderers
build pages only from `Html` pieces and `esc`, so nothing a producer wrote can become markup.
"""

from __future__ import annotations

import datetime
import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import quote, urlencode

#: how many bytes of a key or value are shown before the rest is cut
SHOWN_BYTES = 1024
NAV = (("cluster", "/", "Cluster"), ("topics", "/topics", "Topics"),
       ("groups", "/groups", "Groups"), ("messages", "/messages", "Messages"),
       ("audit", "/audit", "Audit"))  # fmt: skip
#: what a table shows for a value that is not known
MISSING = "-"


class Html(str):
    """Markup that is safe as it is. Adding text to it escapes the text."""

    __slots__ = ()

    def __add__(self, other: str) -> Html:
        return Html(str.__add__(self, esc(other)))

    def __radd__(self, other: str) -> Html:
        return Html(str.__add__(esc(other), self))


def esc(value: object) -> Html:
    """`value` as text in markup: escaped, unless it is markup already."""
    if isinstance(value, Html):
        return value
    return Html(html.escape(MISSING if value is None else str(value), quote=True))


def join(parts: Iterable[object], separator: str = "") -> Html:
    return Html(esc(separator).join(esc(p) for p in parts))


def tag(element: str, content: object = "", /, **attributes: object) -> Html:
    """`<element attributes>content</element>`: an attribute's name loses a trailing `_`
    (`class_`) and has `-` for `_` (`data_refresh`); a None attribute is left out."""
    attrs = "".join(f' {k.rstrip("_").replace("_", "-")}="{esc(v)}"'
                    for k, v in attributes.items() if v is not None)  # fmt: skip
    return Html(f"<{element}{attrs}>{esc(content)}</{element}>")


def void(element: str, /, **attributes: object) -> Html:
    """An element with no content and no end tag (`<input ...>`)."""
    return Html(tag(element, **attributes).removesuffix(f"</{element}>"))


def link(href: str, text: object) -> Html:
    return tag("a", text, href=href)


def topic_href(name: str) -> str:
    return "/topics/" + quote(name, safe="")


def group_href(name: str) -> str:
    return "/groups/" + quote(name, safe="")


def messages_href(topic: str, partition: int, **query: object) -> str:
    fields = {"topic": topic, "partition": partition, **query}
    return "/messages?" + urlencode({k: v for k, v in fields.items() if v is not None})


@dataclass(frozen=True, slots=True)
class Cell:
    """A table cell with a class (`num` right-aligns it, `bad` and `good` colour it)."""

    content: object
    class_: str | None = None


def num(value: object, class_: str = "") -> Cell:
    return Cell(value, f"num {class_}".strip())


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[object]],
    *,
    empty: str = "nothing to show",
    id_: str | None = None,
) -> Html:
    """A table; each cell a value, `Html` or a `Cell`. With no rows, `empty` says why."""
    body = [tag("tr", join(_cell(c) for c in row)) for row in rows]
    if not body:
        return tag("p", empty, class_="empty")
    head = tag("thead", tag("tr", join(tag("th", h) for h in headers)))
    return tag("table", join([head, tag("tbody", join(body))]), id=id_)


def _cell(value: object) -> Html:
    if isinstance(value, Cell):
        return tag("td", value.content, class_=value.class_ or None)
    return tag("td", value)


def facts(pairs: Iterable[tuple[str, object]]) -> Html:
    """A definition list of (name, value)."""
    return tag("dl", join(tag("dt", k) + tag("dd", v) for k, v in pairs), class_="facts")


def section(title: str, *content: object) -> Html:
    return tag("section", join([tag("h2", title), *content]))


def page(title: str, body: object, *, active: str, cluster: str, refresh_s: float = 0) -> Html:
    """The whole document: head, navigation, `body`. `refresh_s` above 0 reloads the page on
    that period (console.js; the reader can pause it)."""
    nav = join(tag("a", label, href=href, class_="active" if key == active else None)
               for key, href, label in NAV)  # fmt: skip
    refresh = Html("")
    if refresh_s > 0:
        toggle = void("input", type="checkbox", id="refresh-toggle", checked="checked")
        refresh = tag("label", toggle + esc(f" refresh every {refresh_s:g} s"), class_="refresh")
    header = tag("header", join([tag("span", "weir console", class_="brand"), tag("nav", nav),
                                 tag("span", cluster, class_="cluster"), refresh]))  # fmt: skip
    head = join([
        Html('<meta charset="utf-8">'),
        Html('<meta name="viewport" content="width=device-width, initial-scale=1">'),
        tag("title", f"{title} · weir console"),
        Html('<link rel="icon" href="data:,">'),
        Html('<link rel="stylesheet" href="/static/console.css">'),
        Html('<script src="/static/console.js" defer></script>'),
    ])  # fmt: skip
    main = tag("main", join([tag("h1", title), body]))
    body_element = tag("body", header + main, data_refresh=f"{refresh_s:g}")
    document = tag("html", tag("head", head) + body_element, lang="en")
    return Html("<!doctype html>\n") + document


# ---- values ------------------------------------------------------------------------------------


def human_bytes(count: int | None) -> str:
    if count is None:
        return MISSING
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{count} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def timestamp(ms: int | None) -> str:
    """A record timestamp as UTC to the millisecond: 2026-11-28 08:00:00.123Z."""
    if ms is None or ms < 0:
        return MISSING
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}Z"


@dataclass(frozen=True, slots=True)
class Shown:
    """How a key, value or header is shown: `kind` is text, hex or null; `cut` counts the
    bytes not shown."""

    kind: str
    text: str
    cut: int = 0


def show_bytes(data: bytes | None, limit: int = SHOWN_BYTES) -> Shown:
    """Text when the bytes are UTF-8 without control characters (tabs and newlines allowed),
    else hex, two digits a byte and a space between bytes."""
    if data is None:
        return Shown("null", "null")
    head, cut = data[:limit], max(0, len(data) - limit)
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        if cut and _cut_in_character(head):
            text = head.decode("utf-8", errors="ignore")
        else:
            return Shown("hex", head.hex(" "), cut)
    if any((ord(c) < 32 and c not in "\t\n\r") or ord(c) == 127 for c in text):
        return Shown("hex", head.hex(" "), cut)
    return Shown("text", text, cut)


def _cut_in_character(head: bytes) -> bool:
    """Whether the bytes are UTF-8 but for a character the cut split at the end."""
    for drop in (1, 2, 3):
        try:
            head[:-drop].decode("utf-8")
            return True
        except UnicodeDecodeError:
            continue
    return False


def shown_html(data: bytes | None) -> Html:
    shown = show_bytes(data)
    more = tag("span", f" … {shown.cut} more bytes", class_="cut") if shown.cut else ""
    return join([tag("span", shown.text, class_=f"value {shown.kind}"), more])
