"""Template mining: masking declared in format files, Drain's clustering, ids that survive a save
and restore of the miner, and Loghub's grouping accuracy on a real sample."""

from __future__ import annotations

import csv
import json
import os
import zlib
from pathlib import Path

import jsonpickle  # type: ignore[import-untyped]
import pyarrow as pa  # type: ignore[import-untyped]
import pytest

from weir.logformats import FormatFileError, FormatRegistry, LineParser, ParsedLine, load_text
from weir.logformats.batch import BatchParser
from weir.logformats.declaration import Mining
from weir.logformats.mining import Occurrences, TemplateMiner, grouping_accuracy, mine_lines
from weir.logformats.template import Masker, template_of

LOGHUB = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "loghub"
# Drain's grouping accuracy on each Loghub-2k sample, tuned per system (Zhu et al., "Tools and
# Benchmarks for Automated Log Parsing", ICSE-SEIP 2019), as bench/logformats.py gives them.
DRAIN_PUBLISHED = {"HDFS": 0.998, "Hadoop": 0.948, "Spark": 0.920, "Zookeeper": 0.967,
                   "Linux": 0.690, "Android": 0.911, "Apache": 1.000, "OpenSSH": 0.788}  # fmt: skip

ORDERS = """
name = "orders"
pattern = '%{TIMESTAMP_ISO8601:timestamp} %{WORD:level} %{GREEDYDATA:message}'

[timestamp]
format = "ISO8601"

[mining]
masking = [{ regex = 'ORD-[A-Z0-9]+', mask = "ORDER" }, { regex = '(?<=user )\\w+', mask = "*" }]
similarity = 0.6
depth = 5
extra_delimiters = ["="]

[[samples]]
line = '2024-07-01T09:30:00 INFO order ORD-X17 paid by user alice'
template = "order <ORDER> paid by user <*>"
"""


def test_masking_rules_from_the_format_file_run_before_the_default_ones() -> None:
    declared = load_text(ORDERS, "orders.toml")
    assert (declared.mining.similarity, declared.mining.depth) == (0.6, 5)
    assert declared.mining.extra_delimiters == ("=",)
    parser = LineParser(year=2024, registry=FormatRegistry.of([declared]))
    parsed = parser.parse("orders", "2024-07-01T09:30:00 INFO order ORD-AB9 of 3 items paid")
    assert isinstance(parsed, ParsedLine)
    assert parsed.template == "order <ORDER> of <*> items paid"
    batch = BatchParser(year=2024, registry=FormatRegistry.of([declared]))
    line = b"2024-07-01T09:30:00 INFO order ORD-AB9 paid by user bob"
    table = batch.parse(pa.array([b"orders"]), pa.array([line]))
    assert table.column("template").to_pylist() == ["order <ORDER> paid by user <*>"]


def test_default_masking_can_be_turned_off() -> None:
    text = ORDERS.replace("extra_delimiters", "default_masking = false\nextra_delimiters")
    declared = load_text(text.split("[[samples]]")[0], "orders.toml")
    parser = LineParser(year=2024, registry=FormatRegistry.of([declared]))
    parsed = parser.parse("orders", "2024-07-01T09:30:00 INFO order ORD-AB9 of 3 items")
    assert isinstance(parsed, ParsedLine)
    assert parsed.template == "order <ORDER> of 3 items"


@pytest.mark.parametrize(
    ("setting", "problem"),
    [
        ("masking = [{ regex = '(', mask = 'X' }]", "masking regex does not compile"),
        ("masking = [{ regex = 'a' }]", "each masking rule is"),
        ("similarity = 1.5", "similarity must be a number in (0, 1]"),
        ("depth = 2", "depth must be an integer of at least 3"),
        ("threshold = 0.5", "unknown [mining] setting 'threshold'"),
    ],
)
def test_a_bad_mining_setting_names_its_line(setting: str, problem: str) -> None:
    text = f"""name = "bad"
pattern = '%{{TIMESTAMP_ISO8601:timestamp}} %{{GREEDYDATA:message}}'
[timestamp]
format = "ISO8601"
[mining]
{setting}
"""
    with pytest.raises(FormatFileError) as raised:
        load_text(text, "bad.toml")
    assert str(raised.value).startswith("bad.toml:6: ")
    assert problem in str(raised.value)


def test_drain_groups_messages_whose_variables_are_words() -> None:
    miner = TemplateMiner()
    ids = mine_lines(
        miner,
        "syslog",
        ["session opened for user alice", "session opened for user bob", "disk <*> is full"],
    )
    assert ids[0] == ids[1] != ids[2]
    assert miner.template(ids[0]) == "session opened for user <*>"


def test_template_ids_survive_a_save_and_restore_of_the_miner() -> None:
    first = ["connection from <*> closed", "user login by alice", "user login by bob"]
    later = ["user login by carol", "connection from <*> closed", "cache cleared", "disk full"]
    kept = TemplateMiner()
    mine_lines(kept, "app", first)
    restored = TemplateMiner.from_bytes(kept.to_bytes())
    assert mine_lines(restored, "app", later) == mine_lines(kept, "app", later)
    assert restored.templates() == kept.templates()
    ids = mine_lines(restored, "app", later)
    assert ids[0] == mine_lines(restored, "app", ["user login by dave"])[0] == 2
    assert len(set(ids)) == 4


def test_a_message_mined_before_keeps_its_id_and_is_known_after_a_restore() -> None:
    miner = TemplateMiner()
    first = mine_lines(miner, "app", ["user login by alice", "cache cleared"])
    assert dict(miner.known()) == {("app", "user login by alice"): first[0],
                                   ("app", "cache cleared"): first[1]}  # fmt: skip
    # Bob widens alice's template; alice's own message still has the id it had.
    mine_lines(miner, "app", ["user login by bob"])
    restored = TemplateMiner.from_bytes(miner.to_bytes())
    assert restored.known() == miner.known()
    assert mine_lines(restored, "app", ["user login by alice"]) == [first[0]]


def test_a_state_of_the_first_version_still_loads() -> None:
    """The first version saved the Drain trees as drain3's jsonpickle documents, in JSON."""
    miner = TemplateMiner()
    ids = mine_lines(miner, "app", ["user login by alice", "cache cleared", "user login by bob"])
    document = {
        "version": 1,
        "drains": {s: jsonpickle.dumps(d, keys=True) for s, d in miner._drains.items()},
        "ids": [[source, cluster, tid] for (source, cluster), tid in miner._ids.items()],
        "seen": [[tid, *seen] for tid, seen in miner._seen.items()],
    }
    restored = TemplateMiner.from_bytes(zlib.compress(json.dumps(document).encode()))
    assert restored.templates() == miner.templates()
    assert mine_lines(restored, "app", ["user login by carol", "disk full"])[0] == ids[0]
    with pytest.raises(ValueError, match="version 7"):
        TemplateMiner.from_bytes(zlib.compress(json.dumps({"version": 7}).encode()))


def test_ids_are_unique_across_formats_and_counts_and_times_add_up() -> None:
    miner = TemplateMiner()
    first = miner.mine([Occurrences("hdfs", "done", 3, 10, 20, (0, 5))])
    second = miner.mine([Occurrences("spark", "done", 1, 5, 5, (0, 1)),
                         Occurrences("hdfs", "done", 2, 30, 40, (1, 0))])  # fmt: skip
    assert first[("hdfs", "done")] == second[("hdfs", "done")] != second[("spark", "done")]
    (hdfs,) = [t for t in miner.templates() if t.source == "hdfs"]
    assert (hdfs.first_seen, hdfs.last_seen, hdfs.count) == (10, 40, 5)


def test_grouping_accuracy_counts_lines_whose_group_is_exactly_their_true_group() -> None:
    assert grouping_accuracy([1, 1, 2, 3], ["a", "a", "b", "b"]) == 0.5
    assert grouping_accuracy([1, 1, 1, 2], ["a", "a", "b", "c"]) == 0.25
    assert grouping_accuracy([7, 7, 8], ["x", "x", "y"]) == 1.0


@pytest.mark.parametrize("name", sorted(DRAIN_PUBLISHED))
def test_grouping_accuracy_on_a_loghub_sample_is_at_least_drains_with_no_settings(
    name: str,
) -> None:
    """Every shipped system's sample, mined with the default masking and settings alone (no
    format's [mining]) and with its format's own, groups at least as well as Drain tuned for it
    (Zhu et al., ICSE-SEIP 2019)."""
    directory = LOGHUB / name
    if not directory.is_dir():
        if os.environ.get("CI") == "true":
            pytest.fail(f"loghub samples not found at {LOGHUB}")
        pytest.skip(f"loghub samples not found at {LOGHUB}")
    lines = (directory / f"{name}_2k.log").read_text(encoding="utf-8").splitlines()
    with (directory / f"{name}_2k.log_structured.csv").open(encoding="utf-8", newline="") as f:
        truth = [row["EventTemplate"] for row in csv.DictReader(f)]
    parser = BatchParser(year=2024)
    source = name.lower()
    keys = pa.array([source.encode()] * len(lines))
    table = parser.parse(keys, pa.array([line.encode() for line in lines]))
    messages = table.column("message").to_pylist()
    assert None not in messages
    for mining in (Mining(), parser.registry.reader(source).format.mining):
        masked = Masker(mining).mask_all(messages)
        ids = mine_lines(TemplateMiner({source: mining}), source, masked)
        assert grouping_accuracy(ids, truth) >= DRAIN_PUBLISHED[name]


@pytest.mark.parametrize(
    ("message", "template"),
    [
        ("connection from 10.1.2.3 at Fri Jun 17 07:07:00 2005", "connection from <*> at <*>"),
        ("job started 2015-07-29 17:41:44,747 on node 3", "job started <*> on node <*>"),
        ("retry at 07:07:00.123 failed", "retry at <*> failed"),
        ("ask 10.0.0.1:50010 to delete  blk_1 blk_-2 blk_3", "ask <*>:<*> to delete  blk_<*>"),
        ("ports 80, 443, 8080 open", "ports <*> open"),
        ("Mayday from May", "Mayday from May"),
    ],
)
def test_default_masking_makes_a_date_and_a_list_one_variable(message: str, template: str) -> None:
    assert template_of(message) == template


def test_positions_masked_in_both_agree_so_a_message_of_many_variables_joins_its_template() -> None:
    miner = TemplateMiner()
    ids = mine_lines(miner, "app", ["copy <*> to <*> took <*> ms for <*> by alice",
                                    "copy <*> to <*> took <*> ms for <*> by bob"])  # fmt: skip
    assert ids[0] == ids[1]
    assert miner.template(ids[0]) == "copy <*> to <*> took <*> ms for <*> by <*>"


def test_a_token_holding_a_mask_is_a_variable_of_the_prefix_tree() -> None:
    miner = TemplateMiner()
    ids = mine_lines(
        miner, "app", ["Resolved host-<*>.corp to rack", "Resolved db-<*>.corp to rack"]
    )
    assert ids[0] == ids[1]
    assert miner.template(ids[0]) == "Resolved <*> to rack"


def test_a_message_of_four_tokens_or_more_may_differ_from_its_template_in_one_word() -> None:
    assert Mining().similarity > 3 / 4
    miner = TemplateMiner()
    four = mine_lines(miner, "app", ["user login by alice", "user login by bob"])
    three = mine_lines(miner, "app", ["disk sda failed", "disk sdb failed"])
    assert four[0] == four[1] and three[0] != three[1]
