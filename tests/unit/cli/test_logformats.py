"""`weir logs formats detect FILE`, run as a user runs it: which format detection gives each
line of a mixed file, the lines no format takes, and user formats that shadow shipped ones."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import weir.logformats
from weir.logformats import FormatRegistry, load_text
from weir.logformats.detection import detection_report

WEIR = Path(sys.executable).parent / "weir"
HDFS = [
    "081109 203615 148 INFO dfs.DataNode$PacketResponder: PacketResponder 1 for block "
    "blk_38865049064139660 terminating",
    "081109 203807 222 INFO dfs.DataNode$PacketResponder: PacketResponder 0 for block "
    "blk_-6952295868487656571 terminating",
]
SSH = [
    "Dec 10 06:55:46 LabSZ sshd[24200]: reverse mapping checking getaddrinfo for "
    "ns.marryaldkfaczcz.com [173.234.31.186] failed - POSSIBLE BREAK-IN ATTEMPT!",
    "Dec 10 06:55:48 LabSZ sshd[24200]: Failed password for invalid user webmaster from "
    "173.234.31.186 port 38926 ssh2",
]
MAC = [
    "Jul  1 09:01:05 calvisitor-10-105-160-95 sandboxd[129] ([31211]): com.apple.Addres(31211) "
    "deny network-outbound /private/var/run/mDNSResponder",
    "Jul  1 09:02:26 calvisitor-10-105-160-95 kernel[0]: ARPT: 620701.011328: wl0: wake",
]
STRAY = ["just some words", "-- MARK --"]
GATEWAY = """\
name = "gateway-ssh"
pattern = '%{SYSLOGTIMESTAMP:ts} %{NOTSPACE:host} sshd\\[%{INT:pid}\\]: %{GREEDYDATA:message}'
[timestamp]
field = "ts"
format = "%b %d %H:%M:%S"
"""
SANDBOX = """\
name = "sandbox"
pattern = '%{SYSLOGTIMESTAMP:timestamp} %{NOTSPACE:host} sandboxd%{GREEDYDATA:message}'
[timestamp]
format = "%b %d %H:%M:%S"
"""


def _detect(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(WEIR), "logs", "formats", "detect", *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def _mixed_file(tmp_path: Path) -> Path:
    lines = [HDFS[0], MAC[0], SSH[0], "", HDFS[1], SSH[1], STRAY[0], MAC[1], STRAY[1]]
    path = tmp_path / "mixed.log"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_detect_counts_each_formats_lines_and_shows_the_first_and_the_undetected(
    tmp_path: Path,
) -> None:
    result = _detect(str(_mixed_file(tmp_path)), "--examples", "1")
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    taken = {row["format"]: row for row in rows if row.get("format")}
    assert {name: row["lines"] for name, row in taken.items()} == {
        "hdfs": 2, "openssh": 2, "syslog": 2
    }
    assert taken["hdfs"]["first"] == [{"line_number": 1, "line": HDFS[0]}]
    assert taken["syslog"]["first"] == [{"line_number": 2, "line": MAC[0]}]
    (undetected,) = [row for row in rows if "format" in row and row["format"] is None]
    assert undetected["reason"] == "none" and undetected["lines"] == 2
    assert undetected["first"] == [{"line_number": 7, "line": STRAY[0]}]
    assert rows[-1] == {"summary": {"lines": 8, "detected": 6, "undetected": 2}}
    assert result.stderr == ""
    assert result.returncode == 1


def test_detect_warns_when_a_user_format_takes_lines_from_a_shipped_one(tmp_path: Path) -> None:
    formats = tmp_path / "formats"
    formats.mkdir()
    (formats / "gateway.toml").write_text(GATEWAY)
    (formats / "sandbox.toml").write_text(SANDBOX)
    mixed = tmp_path / "mixed.log"
    mixed.write_text("\n".join([*HDFS, *SSH, *MAC]) + "\n")
    result = _detect(str(mixed), "--formats", str(formats))
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    taken = {row["format"]: row["lines"] for row in rows if row.get("format")}
    assert taken == {"hdfs": 2, "gateway-ssh": 2, "sandbox": 1, "syslog": 1}
    warnings = sorted(result.stderr.splitlines())
    assert len(warnings) == 2, result.stderr
    assert warnings[0].startswith(
        f"weir: warning: the format gateway-ssh ({formats / 'gateway.toml'}) shadows the "
        "built-in openssh: it takes 2 line(s) that openssh would take (first: line 3)"
    )
    assert "the format sandbox" in warnings[1] and "built-in syslog: it takes 1 line" in warnings[1]
    assert result.returncode == 0


def test_detect_refuses_a_broken_format_file(tmp_path: Path) -> None:
    (tmp_path / "broken.toml").write_text(GATEWAY.replace("%{INT:pid}", "%{NOSUCH:pid}"))
    result = _detect(str(_mixed_file(tmp_path)), "--formats", str(tmp_path / "broken.toml"))
    assert result.returncode == 2
    assert result.stderr.startswith(f"weir: {tmp_path / 'broken.toml'}:2: ")


def test_lines_two_equally_specific_formats_match_are_reported_as_ambiguous() -> None:
    twin = load_text(GATEWAY.replace("gateway-ssh", "twin"), "twin.toml")
    registry = FormatRegistry.of([*FormatRegistry.builtin(), load_text(GATEWAY, "g.toml"), twin])
    report = detection_report(registry, enumerate(SSH, 1))
    assert report.taken == {}
    assert report.undetected["ambiguous: gateway-ssh, twin"].lines == 2
    shadowing = {(s.user, s.builtin, s.ambiguous, s.lines) for s in report.shadowing(registry)}
    assert shadowing == {("gateway-ssh", "openssh", True, 2), ("twin", "openssh", True, 2)}


def test_detect_warns_when_a_user_format_makes_a_shipped_ones_lines_ambiguous(
    tmp_path: Path,
) -> None:
    """A copy of the shipped syslog under another name matches syslog's lines exactly as
    specifically: detection gives them to neither, and the job would quarantine them."""
    shipped = Path(weir.logformats.__file__).parent / "formats" / "syslog.toml"
    copy = shipped.read_text().replace('name = "syslog"', 'name = "mysyslog"')
    (tmp_path / "mysyslog.toml").write_text(copy.replace("aliases = ", "# aliases = "))
    result = _detect(str(_mixed_file(tmp_path)), "--formats", str(tmp_path / "mysyslog.toml"))
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    reasons = {row["reason"]: row["lines"] for row in rows if row.get("reason")}
    assert reasons == {"ambiguous: mysyslog, syslog": 2, "none": 2}
    assert result.stderr.startswith(
        f"weir: warning: the format mysyslog ({tmp_path / 'mysyslog.toml'}) shadows the "
        "built-in syslog: it makes ambiguous (quarantined) 2 line(s) that syslog would take "
        "(first: line 2)"
    )


def test_detect_lines_gives_each_lines_format_before_the_counts(tmp_path: Path) -> None:
    formats = tmp_path / "formats"
    formats.mkdir()
    (formats / "gateway.toml").write_text(GATEWAY)
    result = _detect(str(_mixed_file(tmp_path)), "--lines", "--formats", str(formats))
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    per_line = [row for row in rows if "line_number" in row]
    assert [(row["line_number"], row["format"]) for row in per_line] == [
        (1, "hdfs"), (2, "syslog"), (3, "gateway-ssh"), (5, "hdfs"), (6, "gateway-ssh"),
        (7, None), (8, "syslog"), (9, None),
    ]  # fmt: skip
    assert per_line[0]["line"] == HDFS[0]
    assert per_line[2]["shadows"] == "openssh" and "shadows" not in per_line[1]
    assert per_line[5]["reason"] == "none" and "reason" not in per_line[0]
    counts = rows[len(per_line) : -1]
    assert {row["format"] or row["reason"]: row["lines"] for row in counts} == {
        "hdfs": 2, "gateway-ssh": 2, "syslog": 2, "none": 2
    }  # fmt: skip
    assert rows[-1] == {"summary": {"lines": 8, "detected": 6, "undetected": 2}}
    assert "shadows the built-in openssh: it takes 2 line(s)" in result.stderr
    assert result.returncode == 1
