"""One compiled regex per plain-text log format, and the shared code that turns a match into a
ParsedLine.

Every pattern names its fields with the same group names (``year``/``yy``, ``month``/``mname``,
``day``, ``hour``, ``minute``, ``second``, ``frac``, ``level``, ``component``, ``pid``,
``thread``, ``host``, ``message``), so one builder serves all formats. Patterns are anchored,
ASCII-only for ``\\d``/``\\w``, and let the message span embedded newlines (multi-line records
such as stack traces stay one record). Formats without a year (syslog, OpenSSH, Android) take
the parser's configured year; two-digit years (HDFS, Spark) are 20yy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from weir.pipeline.parsing.levels import normalise_level
from weir.pipeline.parsing.model import ParsedLine, Quarantined, QuarantineReason
from weir.pipeline.parsing.template import template_of

MONTHS = {
    name: number
    for number, name in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"),
        start=1,
    )
}

_HMS = r"(?P<hour>\d\d):(?P<minute>\d\d):(?P<second>\d\d)"
_ISO_DATE = r"(?P<year>\d{4})-(?P<month>\d\d)-(?P<day>\d\d)"
_SYSLOG_DATE = r"(?P<mname>[A-Z][a-z]{2})\s+(?P<day>\d{1,2})"
# loghub's "<Component>: <Content>": the component runs to the first colon followed by
# whitespace or the end of the line.
COMPONENT_MESSAGE = r"(?P<component>.*?)\s*:(?:\s+(?P<message>.*))?\Z"
# The message after a header: whitespace, then the rest of the line.
MESSAGE = r"(?:\s+(?P<message>.*))?\Z"
# A BSD syslog tag: "<component>[<pid>]:" or "<component>:".
SYSLOG_TAG = r"(?P<component>[^\[\]:]*?)(?:\[(?P<pid>\d+)\])?:"
# Inside Zookeeper's brackets: "<thread>:<component>@<line>] -", the thread optional and holding
# anything (colons too).
ZOOKEEPER_ORIGIN = r"(?:(?P<thread>.*?):)?(?P<component>[^:@\]]*)@(?P<lineno>\d+)\]\s+-"
_FLAGS = re.ASCII | re.DOTALL

PATTERNS = {
    # [Sun Dec 04 04:47:44 2005] [error] msg; also Apache 2.4's [Sun Dec 04 04:47:44.123456 2005]
    # [core:error] [pid 12:tid 34] msg.
    "apache": (
        r"\[(?:[A-Z][a-z]{2} )?(?P<mname>[A-Z][a-z]{2}) (?P<day>\d\d) "
        + _HMS
        + r"(?:\.(?P<frac>\d+))? (?P<year>\d{4})\]\s+"
        r"\[(?:(?P<component>[^\]:\s]+):)?(?P<level>[a-z]+\d?)\]"
        r"(?:\s+\[pid (?P<pid>\d+)(?::tid (?P<thread>\d+))?\])?(?:\s+(?P<message>.*))?\Z"
    ),
    # 2015-07-29 17:41:44,747 - INFO  [QuorumPeer[myid=1]/0:0:...:2181:FastLeaderElection@774] - msg
    "zookeeper": (
        _ISO_DATE + r" " + _HMS + r",(?P<frac>\d{3})\s+-\s+(?P<level>[A-Z]+)\s+"
        r"\[" + ZOOKEEPER_ORIGIN + MESSAGE
    ),
    # 2015-10-18 18:01:47,978 INFO [main] org.apache.hadoop...MRAppMaster: msg
    "hadoop": (
        _ISO_DATE + r" " + _HMS + r",(?P<frac>\d{3})\s+(?P<level>[A-Z]+)\s+"
        r"\[(?P<thread>.*?)\]\s+" + COMPONENT_MESSAGE
    ),
    # 081109 203615 148 INFO dfs.DataNode$PacketResponder: msg
    "hdfs": (
        r"(?P<yy>\d\d)(?P<month>\d\d)(?P<day>\d\d)\s+(?P<hour>\d\d)(?P<minute>\d\d)(?P<second>\d\d)"
        r"\s+(?P<pid>\d+)\s+(?P<level>[A-Z]+)\s+" + COMPONENT_MESSAGE
    ),
    # 17/06/09 20:10:40 INFO spark.SecurityManager: msg
    "spark": (
        r"(?P<yy>\d\d)/(?P<month>\d\d)/(?P<day>\d\d)\s+"
        + _HMS
        + r"\s+(?P<level>[A-Z]+)\s+"
        + COMPONENT_MESSAGE
    ),
    # 03-17 16:13:38.811  1702  2395 D WindowManager: msg  (logcat "threadtime")
    "android": (
        r"(?P<month>\d\d)-(?P<day>\d\d)\s+" + _HMS + r"\.(?P<frac>\d{3})\s+(?P<pid>\d+)\s+"
        r"(?P<thread>\d+)\s+(?P<level>[VDIWEFA])\s+" + COMPONENT_MESSAGE
    ),
    # Dec 10 06:55:46 LabSZ sshd[24200]: msg
    "openssh": (
        _SYSLOG_DATE + r"\s+" + _HMS + r"\s+(?P<host>\S+)\s+(?P<component>sshd)\[(?P<pid>\d+)\]:"
        r"(?:\s+(?P<message>.*))?\Z"
    ),
    # Jun 14 15:16:01 combo sshd(pam_unix)[19939]: msg   (BSD syslog, RFC 3164)
    "linux": _SYSLOG_DATE + r"\s+" + _HMS + r"\s+(?P<host>\S+)\s+" + SYSLOG_TAG + MESSAGE,
}


def _year(fields: dict[str, str | None], default_year: int) -> int:
    year, yy = fields.get("year"), fields.get("yy")
    if year:
        return int(year)
    return 2000 + int(yy) if yy else default_year


def _month(fields: dict[str, str | None]) -> int:
    month, name = fields.get("month"), fields.get("mname") or ""
    if month:
        return int(month)
    if name not in MONTHS:
        raise ValueError(f"unknown month name {name!r}")
    return MONTHS[name]


def _timestamp(fields: dict[str, str | None], default_year: int) -> datetime:
    """The match's date and time; raises ValueError if it is not a real one."""
    frac = fields.get("frac")
    return datetime(
        _year(fields, default_year),
        _month(fields),
        int(fields["day"] or ""),
        int(fields["hour"] or ""),
        int(fields["minute"] or ""),
        int(fields["second"] or ""),
        int(frac[:6].ljust(6, "0")) if frac else 0,
    )


def _optional(value: str | None) -> str | None:
    value = value.strip() if value else value
    return value or None


@dataclass(frozen=True, slots=True)
class TextFormat:
    """A plain-text log format: its name and its anchored regex. Stateless and thread-safe."""

    name: str
    pattern: re.Pattern[str]

    def matches(self, line: str) -> bool:
        return self.pattern.match(line) is not None

    def parse(self, line: str, year: int) -> ParsedLine | Quarantined | None:
        """The parsed line, a quarantine for invalid fields, or None if the shape differs."""
        match = self.pattern.match(line)
        if match is None:
            return None
        fields = match.groupdict()
        try:
            timestamp = _timestamp(fields, year)
        except ValueError as error:
            return Quarantined(
                source=self.name,
                line=line,
                reason=QuarantineReason.BAD_TIMESTAMP,
                detail=f"invalid {self.name} timestamp: {error}",
            )
        return self._parsed(fields, timestamp)

    def _parsed(self, fields: dict[str, str | None], timestamp: datetime) -> ParsedLine:
        raw_level, pid = fields.get("level"), fields.get("pid")
        message = (fields.get("message") or "").strip()
        return ParsedLine(
            source=self.name,
            timestamp=timestamp,
            level=normalise_level(raw_level) if raw_level else None,
            raw_level=raw_level,
            component=_optional(fields.get("component")),
            pid=int(pid) if pid else None,
            message=message,
            template=template_of(message),
            host=fields.get("host"),
            thread=_optional(fields.get("thread")),
        )


TEXT_FORMATS = {
    name: TextFormat(name, re.compile(regex, _FLAGS)) for name, regex in PATTERNS.items()
}
