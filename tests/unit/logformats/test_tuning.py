"""Mining settings chosen on labelled lines: the sweep, the choice among its trials and the
``[mining]`` table written for a format file."""

from __future__ import annotations

import pytest

from weir.logformats import load_text
from weir.logformats.declaration import MaskRule, Mining
from weir.logformats.mining import TemplateMiner, grouping_accuracy, mine_lines
from weir.logformats.tuning import DEPTHS, SIMILARITIES, Trial, best, mining_section, sweep

FORMAT = """\
name = "shop"
pattern = '%{TIMESTAMP_ISO8601:timestamp} %{GREEDYDATA:message}'
[timestamp]
format = "ISO8601"
"""
# "cart <*> opened" and "cart <*> closed" are two events: a similarity above 2/3 keeps them
# apart. The disk's name varies within an event: at the default depth (two tokens in the prefix
# tree) it splits the event, at depth 4 (one) it does not.
MESSAGES = ["cart <*> opened", "cart <*> closed", "cart <*> opened", "cart <*> closed",
            "disk sda of host <*> is full", "disk sdb of host <*> is full",
            "disk sda of host <*> is fine"]  # fmt: skip
TRUTH = ["open", "close", "open", "close", "full", "full", "fine"]


def test_the_sweep_scores_every_setting_and_the_best_is_as_accurate_as_mining_under_it() -> None:
    trials = sweep(MESSAGES, TRUTH)
    assert len(trials) == len(SIMILARITIES) * len(DEPTHS)
    chosen = best(trials)
    assert chosen.accuracy == max(t.accuracy for t in trials) == 1.0
    assert (chosen.similarity, chosen.depth) == (Mining().similarity, 4)
    settings = chosen.settings(Mining())
    ids = mine_lines(TemplateMiner({"shop": settings}), "shop", MESSAGES)
    assert grouping_accuracy(ids, TRUTH) == chosen.accuracy
    assert min(t.accuracy for t in trials) < 1.0


def test_among_equally_accurate_settings_the_defaults_win_then_the_nearest() -> None:
    default = Mining()
    far = Trial(0.5, 6, 0.9)
    near = Trial(default.similarity + 0.05, default.depth, 0.9)
    own = Trial(default.similarity, default.depth, 0.9)
    assert best([far, near, own]) == own
    assert best([far, near]) == near
    assert best([far, near, Trial(0.55, 4, 0.95)]) == Trial(0.55, 4, 0.95)


def test_the_mining_table_reads_back_as_the_settings_it_was_written_from() -> None:
    mining = Mining(
        masking=(MaskRule(r"(?<=user )\w+", "*"), MaskRule(r'ORD-"[A-Z]+\\d', "ORDER")),
        similarity=0.65,
        depth=6,
        extra_delimiters=("=",),
        default_masking=False,
    )
    declared = load_text(FORMAT + mining_section(mining), "shop.toml")
    assert declared.mining == mining
    assert load_text(FORMAT + mining_section(Mining()), "shop.toml").mining == Mining()


def test_the_sweep_needs_one_true_event_per_message() -> None:
    with pytest.raises(ValueError, match="one true event per message"):
        sweep(MESSAGES, TRUTH[:-1])
