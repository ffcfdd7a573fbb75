"""Template mining: messages grouped into event templates with Drain (the drain3 library).

Mining has two steps. Masking (``Masker``) runs wherever lines are parsed: each message's
variable parts become mask tokens, first by the format's own ``[mining] masking`` rules (what a
rule's regex matches becomes ``<MASK>``; ``mask = "*"`` gives Drain's wildcard ``<*>``), then,
unless the format sets ``default_masking = false``, by ``template_of``'s rules (numbers,
addresses, ids, paths). The masked message is the ``template`` column. Clustering
(``TemplateMiner``) then groups masked messages into templates with Drain, one Drain tree per
format, with the format's similarity threshold, depth and extra delimiters. The trees are
``MaskedDrain``'s: Drain made for masked messages, whose defaults (``Mining``) hold on systems
they were not chosen on (``bench/logformats.py --leave-one-out``); ``weir logs formats tune``
suggests a format's own from a labelled sample (``weir.logformats.tuning``).

``TemplateMiner.mine`` takes the distinct masked messages of a batch of lines (``Occurrences``:
how often each occurred, when first and last, and where first, which orders them) and returns
each one's template id. A masked message mined before keeps the id it had (``known``: every
masked message mined so far, up to ``MAX_KNOWN`` of them, with its id; what lets the job's tasks
stamp most lines themselves). Any other that fits a known template exactly takes its id
(Drain's ``match``); the rest are added to the tree (Drain's ``add_log_message``), which may
widen a template but never changes a template's id. Ids are integers, unique across formats,
given in the order templates are found. The miner's whole state (the Drain trees, the ids, each
template's first and last time seen and number of lines) round-trips through ``to_bytes`` and
``from_bytes``, so mining continues after a restart exactly as without it. The state is a
compressed pickle (the Drain trees' classes are drain3's), which the job writes beside its
warehouse with each batch: whoever may write there may change what the job reads anyway. A
state of the first version (the trees as drain3's jsonpickle documents) still loads. A state
saved before the trees were ``MaskedDrain``'s keeps its plain Drain trees, as it keeps their
settings: its templates go on as they were.

It never reads the clock or does IO; a TemplateMiner is not thread-safe.
"""

from __future__ import annotations

import json
import pickle
import zlib
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jsonpickle  # type: ignore[import-untyped]
from drain3.drain import Drain

from weir.logformats.declaration import Mining
from weir.logformats.template import MASK

STATE_VERSION = 2
_JSON_STATE = b"{"  # how a first-version state (JSON) starts; a pickle starts with its protocol
# Drain's default: how many children a node of its prefix tree keeps before it sends further
# tokens to a wildcard child.
MAX_CHILDREN = 100
# Masked messages whose ids the miner remembers. Past this many, new ones are still mined (and
# their ids stable through Drain's tree), but not remembered: a format whose masking leaves
# variables in its messages would otherwise grow the state without bound.
MAX_KNOWN = 200_000


@dataclass(frozen=True, slots=True)
class Occurrences:
    """One distinct masked message of a batch: how many lines had it, the first and last of
    their timestamps (microseconds; None when none of them has one), and where the first of
    them was (``position``, any sortable key: the batch is mined in that order)."""

    source: str
    template: str
    lines: int
    first_seen: int | None
    last_seen: int | None
    position: tuple[Any, ...] = ()


@dataclass(slots=True)
class Template:
    """A mined template's row of the ``templates`` table (times in microseconds)."""

    id: int
    source: str
    template: str
    first_seen: int | None
    last_seen: int | None
    count: int


class MaskedDrain(Drain):  # type: ignore[misc]
    """Drain over masked messages. Where both a template and a message have a mask, they agree:
    drain3 counts a template's mask as a mismatch, so a message with many masked variables is
    less similar to its own template than the threshold and splits off. A token holding a mask
    (``blk_<*>``, ``MSRA-<*>.corp``) is a variable in the prefix tree, as drain3 makes a token
    with digits (masking took those digits away). And a message of ``ONE_WORD_FROM`` tokens or
    more joins a template it differs from in one token whatever the similarity asked (a high
    threshold would otherwise leave no word of a short message variable: "session opened for
    alice")."""

    ONE_WORD_FROM = 4

    def fast_match(
        self, cluster_ids: Sequence[int], tokens: Sequence[str], sim_th: float,
        include_params: bool,
    ) -> Any:  # fmt: skip
        # Drain asks include_params only when it matches exactly (``match``): leave that be.
        if not include_params and len(tokens) >= self.ONE_WORD_FROM:
            sim_th = min(sim_th, (len(tokens) - 1) / len(tokens))
        return super().fast_match(cluster_ids, tokens, sim_th, include_params)

    @staticmethod
    def has_numbers(token: str) -> bool:
        return MASK in token or any(char.isdigit() for char in token)

    def get_seq_distance(
        self, template: Sequence[str], tokens: Sequence[str], include_params: bool
    ) -> tuple[float, int]:
        if not template:
            return 1.0, 0
        similar = masks = 0
        for expected, token in zip(template, tokens, strict=True):
            if expected == MASK:
                masks += 1
                similar += include_params or token == MASK
            elif expected == token:
                similar += 1
        return similar / len(template), masks


class TemplateMiner:
    """Template ids for masked messages, one Drain tree per format (see the module doc)."""

    def __init__(self, settings: Mapping[str, Mining] | None = None) -> None:
        self.settings = dict(settings or {})
        self._drains: dict[str, Drain] = {}
        self._ids: dict[tuple[str, int], int] = {}  # (source, Drain's cluster id) -> template id
        self._clusters: dict[int, tuple[str, int]] = {}
        # template id -> [first_seen, last_seen, count] (times may be None: see Occurrences)
        self._seen: dict[int, list[Any]] = {}
        self._known: dict[tuple[str, str], int] = {}  # (source, masked message) -> template id

    def __len__(self) -> int:
        return len(self._ids)

    def mine(self, batch: Iterable[Occurrences]) -> dict[tuple[str, str], int]:
        """The template id of each (source, masked message) of ``batch``, mined in the order of
        their positions (then by source and message), and their counts and times recorded."""
        ordered = sorted(batch, key=lambda o: (o.position, o.source, o.template))
        ids: dict[tuple[str, str], int] = {}
        for occurrences in ordered:
            key = (occurrences.source, occurrences.template)
            template_id = ids.get(key)
            if template_id is None:
                template_id = ids[key] = self.assign(*key)
            self._record(template_id, occurrences)
        return ids

    def known(self) -> Mapping[tuple[str, str], int]:
        """The id of each (source, masked message) mined so far (up to ``MAX_KNOWN``): what
        ``mine`` gives them in any later batch."""
        return self._known

    def assign(self, source: str, masked: str) -> int:
        """The template id of one masked message of ``source`` (learning it if it is new)."""
        template_id = self._known.get((source, masked))
        if template_id is None:
            template_id = self._drain_id(source, masked)
            if len(self._known) < MAX_KNOWN:
                self._known[(source, masked)] = template_id
        return template_id

    def _drain_id(self, source: str, masked: str) -> int:
        drain = self._drain(source)
        cluster = drain.match(masked)
        if cluster is None:
            cluster, _ = drain.add_log_message(masked)
        key = (source, cluster.cluster_id)
        template_id = self._ids.get(key)
        if template_id is None:
            template_id = self._ids[key] = len(self._ids) + 1
            self._clusters[template_id] = key
        return template_id

    def template(self, template_id: int) -> str:
        """The template's current text (Drain widens a template as it sees more messages)."""
        source, cluster_id = self._clusters[template_id]
        text: str = self._drains[source].id_to_cluster[cluster_id].get_template()
        return text

    def templates(self) -> list[Template]:
        """Every template seen in at least one line, by id."""
        return [
            Template(tid, self._clusters[tid][0], self.template(tid), *seen)
            for tid, seen in sorted(self._seen.items())
        ]

    def to_bytes(self) -> bytes:
        document = {
            "version": STATE_VERSION,
            "drains": self._drains,
            "ids": self._ids,
            "seen": self._seen,
            "known": self._known,
        }
        return zlib.compress(pickle.dumps(document, protocol=pickle.HIGHEST_PROTOCOL), 1)

    @classmethod
    def from_bytes(
        cls, state: bytes, settings: Mapping[str, Mining] | None = None
    ) -> TemplateMiner:
        """The miner ``to_bytes`` saved. Each format's Drain keeps the settings it was created
        with; ``settings`` apply to formats the saved miner had not seen."""
        raw = zlib.decompress(state)
        if raw.startswith(_JSON_STATE):
            return cls._from_json(json.loads(raw), settings)
        document = pickle.loads(raw)
        if document.get("version") != STATE_VERSION:
            raise ValueError(f"unknown template miner state version {document.get('version')!r}")
        miner = cls(settings)
        miner._drains = document["drains"]
        miner._ids = document["ids"]
        miner._clusters = {tid: key for key, tid in miner._ids.items()}
        miner._seen = document["seen"]
        miner._known = document["known"]
        return miner

    @classmethod
    def _from_json(
        cls, document: dict[str, Any], settings: Mapping[str, Mining] | None
    ) -> TemplateMiner:
        """A miner saved by the first version of ``to_bytes``."""
        if document.get("version") != 1:
            raise ValueError(f"unknown template miner state version {document.get('version')!r}")
        miner = cls(settings)
        for source, encoded in document["drains"].items():
            miner._drains[source] = jsonpickle.loads(encoded, keys=True)
        for source, cluster, tid in document["ids"]:
            miner._ids[(source, cluster)] = tid
            miner._clusters[tid] = (source, cluster)
        miner._seen = {tid: [first, last, count] for tid, first, last, count in document["seen"]}
        # A state saved before the miner remembered messages has none: they are learnt again.
        miner._known = {(source, masked): tid for source, masked, tid in document.get("known", [])}
        return miner

    def _drain(self, source: str) -> Drain:
        drain = self._drains.get(source)
        if drain is None:
            mining = self.settings.get(source, Mining())
            drain = self._drains[source] = MaskedDrain(
                depth=mining.depth,
                sim_th=mining.similarity,
                max_children=MAX_CHILDREN,
                extra_delimiters=mining.extra_delimiters,
                param_str=MASK,
            )
        return drain

    def _record(self, template_id: int, occurrences: Occurrences) -> None:
        seen = self._seen.get(template_id)
        if seen is None:
            self._seen[template_id] = [
                occurrences.first_seen,
                occurrences.last_seen,
                occurrences.lines,
            ]
            return
        seen[0] = earliest(seen[0], occurrences.first_seen)
        seen[1] = latest(seen[1], occurrences.last_seen)
        seen[2] += occurrences.lines


def earliest(first: int | None, second: int | None) -> int | None:
    """The earlier of two times, either of which may be unknown (None)."""
    return second if first is None else first if second is None else min(first, second)


def latest(first: int | None, second: int | None) -> int | None:
    """The later of two times, either of which may be unknown (None)."""
    return second if first is None else first if second is None else max(first, second)


def mine_lines(
    miner: TemplateMiner, source: str, templates: Sequence[str], stamps: Sequence[int] | None = None
) -> list[int]:
    """The template id of each of ``templates`` (masked messages of one source, in order), mined
    as one batch."""
    stamps = stamps if stamps is not None else [0] * len(templates)
    found: dict[str, Occurrences] = {}
    for position, (template, stamp) in enumerate(zip(templates, stamps, strict=True)):
        seen = found.get(template)
        if seen is None:
            found[template] = Occurrences(source, template, 1, stamp, stamp, (position,))
        else:
            found[template] = Occurrences(
                source, template, seen.lines + 1, earliest(seen.first_seen, stamp),
                latest(seen.last_seen, stamp), seen.position,
            )  # fmt: skip
    ids = miner.mine(found.values())
    return [ids[(source, template)] for template in templates]


def grouping_accuracy(predicted: Sequence[Hashable], truth: Sequence[Hashable]) -> float:
    """Loghub's grouping accuracy: the share of lines whose predicted group (the lines with the
    same predicted template) is exactly their true group (the lines with the same true one)."""
    if len(predicted) != len(truth):
        raise ValueError("one prediction per line is needed")
    if not predicted:
        return 1.0
    truths_of: dict[Hashable, set[Hashable]] = {}
    for guess, true in zip(predicted, truth, strict=True):
        truths_of.setdefault(guess, set()).add(true)
    predicted_sizes = Counter(predicted)
    true_sizes = Counter(truth)
    correct = 0
    for guess, truths in truths_of.items():
        if len(truths) == 1 and true_sizes[next(iter(truths))] == predicted_sizes[guess]:
            correct += predicted_sizes[guess]
    return correct / len(predicted)
