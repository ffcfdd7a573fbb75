"""bench/logformats.py on a Loghub-layout directory of systems weir does not ship, with the
user's own format files, run as a user runs it."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "logformats.py"
GAME_FORMAT = """\
name = "game"
pattern = '%{TIMESTAMP_ISO8601:timestamp} %{LOGLEVEL:level} %{GREEDYDATA:message}'
[timestamp]
format = "ISO8601"
"""
GAME = [
    ("2024-03-01 12:00:00 INFO player 17 joined room 4", "player <*> joined room <*>"),
    ("2024-03-01 12:00:01 INFO player 18 joined room 4", "player <*> joined room <*>"),
    ("2024-03-01 12:00:02 WARN room 4 is full", "room <*> is full"),
    ("2024-03-01 12:00:03 INFO server shutting down", "server shutting down"),
    ("2024-03-01 12:00:04 WARN room 5 is full", "room <*> is full"),
]
MAC = [  # named after no format: each line's is detected (syslog)
    ("Jul  1 09:01:05 host sandboxd[129] ([31211]): deny network-outbound /var/run/a",
     "deny network-outbound <*>"),
    ("Jul  1 09:01:06 host sandboxd[129] ([31212]): deny network-outbound /var/run/b",
     "deny network-outbound <*>"),
    ("Jul  1 09:02:26 host kernel[0]: ARPT: wake", "ARPT: wake"),
]  # fmt: skip


def _data_set(data: Path, name: str, rows: list[tuple[str, str]]) -> None:
    directory = data / name
    directory.mkdir(parents=True)
    (directory / f"{name}_2k.log").write_text("".join(f"{line}\n" for line, _ in rows))
    with (directory / f"{name}_2k.log_structured.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["LineId", "Content", "EventTemplate"])
        writer.writerows((n, line, template) for n, (line, template) in enumerate(rows, 1))


def test_the_bench_measures_every_data_set_of_a_directory_with_the_users_formats(
    tmp_path: Path,
) -> None:
    data, formats, out = tmp_path / "data", tmp_path / "formats", tmp_path / "out.json"
    _data_set(data, "Game", GAME)
    _data_set(data, "Mac", MAC)
    (data / "notes").mkdir()  # not a data set: no sample in it
    formats.mkdir()
    (formats / "game.toml").write_text(GAME_FORMAT)
    command = [sys.executable, str(BENCH), "--data", str(data), "--formats", str(formats),
               "--out", str(out)]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True, timeout=300)
    results = json.loads(out.read_text())["results"]
    assert sorted(results) == ["Game", "Mac"]
    game, mac = results["Game"], results["Mac"]
    assert (game["format"], game["lines"], game["unparsed_lines"]) == ("game", 5, 0)
    assert game["grouping_accuracy"] == 1.0 and game["templates_true"] == 3
    assert game["drain_published"] is None and game["at_least_drain"] is None
    assert (mac["format"], mac["unparsed_lines"]) == ("detected", 0)
    assert mac["templates_by_format"] == {"syslog": 2}
    assert mac["grouping_accuracy"] == 1.0


def test_the_bench_takes_a_data_sets_format_by_name(tmp_path: Path) -> None:
    data, formats, out = tmp_path / "data", tmp_path / "formats", tmp_path / "out.json"
    _data_set(data, "Arcade", GAME)
    formats.mkdir()
    (formats / "game.toml").write_text(GAME_FORMAT)
    command = [sys.executable, str(BENCH), "--data", str(data), "--formats", str(formats),
               "--format", "Arcade=game", "--out", str(out)]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True, timeout=300)
    arcade = json.loads(out.read_text())["results"]["Arcade"]
    assert (arcade["format"], arcade["grouping_accuracy"]) == ("game", 1.0)


def test_the_bench_ignores_the_formats_mining_and_scores_settings_chosen_on_the_others(
    tmp_path: Path,
) -> None:
    data, formats, out = tmp_path / "data", tmp_path / "formats", tmp_path / "out.json"
    _data_set(data, "Game", GAME)
    _data_set(data, "Arena", GAME[:3])
    formats.mkdir()
    # Its own mining masks whole messages: every line is of one event.
    mining = "[mining]\nmasking = [{ regex = '.+', mask = '*' }]\n"
    (formats / "game.toml").write_text(GAME_FORMAT + mining)
    command = [sys.executable, str(BENCH), "--data", str(data), "--formats", str(formats),
               "--format", "Arena=game", "--out", str(out)]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True, timeout=300)
    assert json.loads(out.read_text())["results"]["Game"]["grouping_accuracy"] < 1.0
    command += ["--default-mining", "--leave-one-out"]
    subprocess.run(command, check=True, capture_output=True, timeout=300)
    report = json.loads(out.read_text())
    assert report["settings"]["default_mining"] is True
    for name in ("Game", "Arena"):
        result = report["results"][name]
        assert result["grouping_accuracy"] == 1.0
        chosen = result["leave_one_out"]
        assert chosen["grouping_accuracy"] == 1.0 and chosen["at_least_drain"] is None
        assert {"similarity", "depth"} <= set(chosen)
