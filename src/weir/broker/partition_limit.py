"""How many partition replicas one broker may host (`max.partitions.per.broker`), and its
default, derived from what the process may hold.

A partition's log keeps `FILES_PER_PARTITION` descriptors open (its active segment, offset index
and time index) and maps its two indexes into memory once they are read. A broker that creates
partitions until a limit of the operating system refuses serves no one meanwhile and leaves the
half-made topic behind, so creation is refused before anything is created once the cluster's
partition replicas would exceed this limit times its live brokers (as Redpanda's
`topic_partitions_per_shard` is multiplied by its shards).

The default takes the tightest of three budgets: half the descriptors `RLIMIT_NOFILE` allows
(the other half is for connections, ZooKeeper, checkpoints and rolled segments), half the memory
maps `vm.max_map_count` allows, and `MEMORY_PER_PARTITION` of physical memory each.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

FILES_PER_PARTITION = 3
MAPS_PER_PARTITION = 2
#: what a partition being written and read costs in resident memory: its indexes' touched
#: pages, its producer state, its share of request and fetch buffers
MEMORY_PER_PARTITION = 1024 * 1024
#: the share of the descriptor and memory-map limits partitions may take
PARTITION_SHARE = 2
MAX_MAP_COUNT = Path("/proc/sys/vm/max_map_count")
#: Linux's default vm.max_map_count, for a system that does not say
DEFAULT_MAX_MAP_COUNT = 65530
#: the budget when a limit is unlimited
UNLIMITED = 2**31 - 1


def default_max_partitions_per_broker() -> int:
    """The tightest of the descriptor, memory-map and memory budgets of this process."""
    files, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if files == resource.RLIM_INFINITY:
        files = UNLIMITED
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return max(
        1,
        min(
            files // PARTITION_SHARE // FILES_PER_PARTITION,
            _max_map_count() // PARTITION_SHARE // MAPS_PER_PARTITION,
            memory // MEMORY_PER_PARTITION,
        ),
    )


def _max_map_count() -> int:
    try:
        return int(MAX_MAP_COUNT.read_text())
    except (OSError, ValueError):
        return DEFAULT_MAX_MAP_COUNT


def limit_refusal(
    *, adding: int, hosted: int, per_broker: int, brokers: int, reserved: int = 0
) -> str | None:
    """Why `adding` partition replicas may not join the `hosted` ones (with `reserved` kept for
    internal topics not created yet); None if they may."""
    limit = per_broker * brokers
    total = hosted + reserved + adding
    if total <= limit:
        return None
    room = max(0, limit - hosted - reserved)
    where = "this broker" if brokers == 1 else f"the cluster's {brokers} live brokers"
    kept = f" ({reserved} kept for internal topics)" if reserved else ""
    return (
        f"Creating {adding} partition replicas would bring {where} to {total}, over the "
        f"limit of {limit} (max.partitions.per.broker={per_broker}); {room} more fit{kept}."
    )
