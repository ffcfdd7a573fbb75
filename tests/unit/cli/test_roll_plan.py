"""What `weir cluster roll` decides without a cluster: the order of the brokers (node ids, the
controller last), the command run for each, and when the cluster counts as fully replicated."""

from __future__ import annotations

from weir.cli.roll import (
    BrokerView,
    PartitionState,
    replication_problems,
    restart_command,
    roll_order,
    summary,
)

ADDRESSES = {1: ("127.0.0.1", 9092), 2: ("127.0.0.1", 9093), 3: ("127.0.0.1", 9094)}


def test_brokers_roll_in_node_id_order_with_the_controller_last() -> None:
    assert roll_order([3, 1, 2], controller=2) == [1, 3, 2]
    assert roll_order({10: "a", 2: "b", 7: "c"}, controller=2) == [7, 10, 2]
    assert roll_order([3, 1, 2], controller=-1) == [1, 2, 3]  # no controller known
    assert roll_order([1], controller=1) == [1]


def test_the_command_names_the_broker_wherever_id_appears() -> None:
    assert restart_command("systemctl restart weir@{id}", 3) == "systemctl restart weir@3"
    assert restart_command("ssh kafka{id} 'restart {id}'", 12) == "ssh kafka12 'restart 12'"
    assert restart_command("echo ${HOME} {ids} {id}", 1) == "echo ${HOME} {ids} 1"


def partition(index: int, leader: int, replicas: tuple[int, ...], isr: tuple[int, ...]):
    return ("t", index), PartitionState("t", index, leader, replicas, isr)


def view(*partitions: tuple[tuple[str, int], PartitionState], brokers=ADDRESSES) -> BrokerView:
    return BrokerView(controller=2, brokers=dict(brokers), partitions=dict(partitions))


def test_a_cluster_is_fully_replicated_when_every_broker_shows_every_isr_full() -> None:
    full = view(partition(0, 1, (1, 2, 3), (3, 1, 2)), partition(1, 2, (2, 3), (2, 3)))
    assert replication_problems({1: full, 2: full, 3: full}, [1, 2, 3]) == []


def test_what_is_not_fully_replicated_is_named() -> None:
    full = view(partition(0, 1, (1, 2, 3), (1, 2, 3)), partition(1, 2, (2, 3), (2, 3)))
    shrunk = view(partition(0, 1, (1, 2, 3), (1, 2)), partition(1, 2, (2, 3), (2, 3)))
    behind = view(partition(0, 1, (1, 2, 3), (1, 2, 3)))
    leaderless = view(partition(0, -1, (1, 2, 3), (1, 2, 3)), partition(1, 2, (2, 3), (2, 3)))
    assert replication_problems({1: full, 2: shrunk, 3: full}, [1, 2, 3]) == [
        "t-0 (leader 1, replicas 1,2,3, isr 1,2)"
    ]
    assert replication_problems({1: full, 2: full, 3: behind}, [1, 2, 3]) == [
        "t-1 not listed by broker 3 yet"
    ]
    assert replication_problems({1: leaderless, 2: full, 3: full}, [1, 2, 3]) == [
        "t-0 (leader -1, replicas 1,2,3, isr 1,2,3)"
    ]


def test_a_broker_that_does_not_answer_or_is_not_registered_is_named() -> None:
    without_3 = view(partition(0, 1, (1, 2), (1, 2)),
                     brokers={n: a for n, a in ADDRESSES.items() if n != 3})  # fmt: skip
    views = {1: without_3, 2: without_3, 3: "127.0.0.1:9094: cannot connect: Connection refused"}
    assert replication_problems(views, [1, 2, 3]) == [
        "broker 3 does not answer: 127.0.0.1:9094: cannot connect: Connection refused",
        "broker 3 is not registered",
    ]
    assert replication_problems({}, [1]) == [
        "broker 1 does not answer: not asked", "broker 1 is not registered"
    ]  # fmt: skip


def test_a_long_list_of_problems_is_cut_short() -> None:
    problems = [f"t-{i} (leader 1, replicas 1,2, isr 1)" for i in range(13)]
    assert summary(problems).endswith("; t-9 (leader 1, replicas 1,2, isr 1); and 3 more")
    assert summary(problems[:2]) == "; ".join(problems[:2])
