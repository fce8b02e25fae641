"""Planning on the driver: which partitions a query reads and the offset range of each.

A :class:`Planner` owns one :class:`kafka_client.Consumer` (manual assignment, never
committing unless asked) and answers three questions: the partitions the options select,
each partition's ``(low, high)`` offsets, and the offsets that ``startingOffsets`` /
``endingOffsets`` / the timestamp options name. The high offset comes from a Fetch answer's
high watermark, not from ListOffsets(latest), which Tansu 0.6 answers with the base offset
of the last batch + 1 (see :meth:`Planner.watermarks`).
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

from pyspark.sql.datasource import InputPartition

from kafka_client import Consumer, KafkaException, TopicPartition
from kafka_client.types import OFFSET_BEGINNING, OFFSET_END

from .options import KafkaOptionError, OffsetSpec, ReadOptions, TimestampSpec

__all__ = ["KafkaDataLossError", "OffsetRange", "Planner", "check_range", "split_ranges",
           "offsets_to_json", "offsets_from_json"]

Key = Tuple[str, int]

#: How long the driver waits for metadata and offsets before giving up.
PLANNING_TIMEOUT_S = 30.0


class KafkaDataLossError(RuntimeError):
    """Offsets a query needs are no longer (or not yet) in the log, with failOnDataLoss on."""


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """One Spark task's share: offsets ``start`` (inclusive) to ``end`` (exclusive) of one
    partition. Picklable; sent from the driver to the executor that reads it."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


def offsets_to_json(offsets: Dict[Key, int]) -> Dict[str, Dict[str, int]]:
    """``{(topic, partition): offset}`` as a streaming offset: ``{topic: {"p": offset}}``
    (the shape of Spark's own Kafka source offsets, string keys as JSON needs)."""
    out: Dict[str, Dict[str, int]] = {}
    for (topic, part), off in sorted(offsets.items()):
        out.setdefault(topic, {})[str(part)] = off
    return out


def offsets_from_json(data: Dict[str, Dict[str, int]]) -> Dict[Key, int]:
    return {(topic, int(part)): int(off) for topic, parts in data.items()
            for part, off in parts.items()}


def split_ranges(ranges: Sequence[OffsetRange],
                 min_partitions: Optional[int]) -> List[OffsetRange]:
    """Drop empty ranges; with ``min_partitions`` above their number, split each range into
    a share of ``min_partitions`` proportional to its size (rounded, at least one part),
    as Spark's Kafka source does, then split the ranges with the largest parts further
    until there are ``min_partitions`` parts (where Spark's rounding can leave fewer). The
    parts of a range cover it exactly, in order."""
    ranges = [r for r in ranges if r.size > 0]
    if not min_partitions or min_partitions <= len(ranges):
        return ranges
    total = sum(r.size for r in ranges)
    counts = [min(r.size, max(1, int(r.size / total * min_partitions + 0.5)))
              for r in ranges]
    while sum(counts) < min_partitions:
        splittable = [i for i, r in enumerate(ranges) if counts[i] < r.size]
        if not splittable:
            break  # every part is a single offset already
        widest = max(splittable, key=lambda i: ranges[i].size / counts[i])
        counts[widest] += 1
    out: List[OffsetRange] = []
    for r, parts in zip(ranges, counts):
        for i in range(parts):
            start = r.start + r.size * i // parts
            end = r.start + r.size * (i + 1) // parts
            out.append(OffsetRange(r.topic, r.partition, start, end))
    return out


class Planner:
    """Driver-side lookups for one query (see the module docstring). Close it after use."""

    def __init__(self, opts: ReadOptions, timeout: float = PLANNING_TIMEOUT_S) -> None:
        self.opts = opts
        self.timeout = timeout
        # A short fetch wait: watermarks() waits for one Fetch answer per partition.
        self.consumer = Consumer(opts.consumer_config(**{"fetch.wait.max.ms": 10}))

    def close(self) -> None:
        self.consumer.close()

    # -- which partitions ------------------------------------------------------------------
    def partitions(self, must_exist: bool) -> List[Key]:
        """The partitions the options select, sorted. A subscribed or assigned topic that
        does not exist is an error with ``must_exist`` (batch queries), and is otherwise
        skipped until it appears (streaming); a missing assigned partition is always an
        error."""
        opts = self.opts
        md = self.consumer.list_topics(timeout=self.timeout)
        existing = {name: sorted(t.partitions) for name, t in md.topics.items()
                    if t.error is None and t.partitions}
        out: List[Key] = []
        if opts.subscribe_pattern is not None:
            pattern = re.compile(opts.subscribe_pattern)
            for name, parts in existing.items():
                if not name.startswith("__") and pattern.fullmatch(name):
                    out.extend((name, p) for p in parts)
        elif opts.subscribe:
            for name in opts.subscribe:
                if name in existing:
                    out.extend((name, p) for p in existing[name])
                elif must_exist:
                    raise KafkaOptionError(f"subscribe: topic {name!r} does not exist")
        else:
            for name, wanted in opts.assign.items():
                if name not in existing:
                    if must_exist:
                        raise KafkaOptionError(f"assign: topic {name!r} does not exist")
                    continue
                missing = [p for p in wanted if p not in existing[name]]
                if missing:
                    raise KafkaOptionError(
                        f"assign: topic {name!r} has no partition "
                        f"{', '.join(map(str, missing))} (it has {len(existing[name])})")
                out.extend((name, p) for p in wanted)
        return sorted(out)

    # -- offsets ---------------------------------------------------------------------------
    def watermarks(self, keys: Sequence[Key]) -> Dict[Key, Tuple[int, int]]:
        """``(low, high)`` of each partition: the log start and the end of the log (the
        offset the next message will get).

        The consumer is assigned every partition at its end and the values come from the
        first Fetch answer of each (``get_watermark_offsets(cached=True)``): its high
        watermark is the true end, where Tansu's ListOffsets(latest) answer is not. With
        ``kafka.isolation.level=read_committed`` the end is the answer's last stable
        offset, as Spark's own source plans (a range to the high watermark could not be
        read while a transaction is open: the task waited its poll timeout and failed).
        The low offset comes from the same answer, or from ListOffsets(earliest) when
        the broker did not send it.
        """
        if not keys:
            return {}
        consumer = self.consumer
        consumer.assign([TopicPartition(t, p, OFFSET_END) for t, p in keys])
        deadline = time.monotonic() + self.timeout
        found: Dict[Key, Tuple[int, int]] = {}
        pending = list(keys)
        while pending:
            still = []
            for key in pending:
                low, high = consumer.get_watermark_offsets(TopicPartition(*key), cached=True)
                if high >= 0:
                    found[key] = (low, consumer._readable_end(TopicPartition(*key)))
                else:
                    still.append(key)
            pending = still
            if pending:
                if time.monotonic() > deadline:
                    names = ", ".join(f"{t} [{p}]" for t, p in pending[:5])
                    raise TimeoutError(f"no Fetch answer within {self.timeout:g}s for "
                                       f"{names}: is the partition's leader available?")
                time.sleep(0.005)
        consumer.unassign()
        for key, (low, high) in found.items():
            if low < 0:
                low = consumer.get_watermark_offsets(TopicPartition(*key),
                                                     timeout=self.timeout)[0]
                found[key] = (low, high)
        return found

    def for_times(self, times: Dict[Key, int]) -> Dict[Key, int]:
        """The first offset whose timestamp is at or after the given time (ms) per
        partition; -1 where there is none."""
        if not times:
            return {}
        asked = [TopicPartition(t, p, ts) for (t, p), ts in sorted(times.items())]
        try:
            got = self.consumer.offsets_for_times(asked, timeout=self.timeout)
        except KafkaException as exc:
            raise KafkaOptionError(f"looking up offsets by timestamp failed: "
                                   f"{exc.args[0].str()}") from None
        out = {}
        for tp in got:
            if tp.error is not None:
                raise KafkaOptionError(f"looking up the offset by timestamp of {tp.topic} "
                                       f"[{tp.partition}] failed: {tp.error.str()}")
            out[(tp.topic, tp.partition)] = tp.offset
        return out

    def resolve(self, spec: Union[OffsetSpec, TimestampSpec], keys: Sequence[Key],
                marks: Dict[Key, Tuple[int, int]], option: str, starting: bool
                ) -> Dict[Key, int]:
        """The absolute offset ``spec`` names for each partition of ``keys``.

        Explicit per-partition specs must name exactly the partitions read (as in Spark);
        a time with no message at or after it resolves to the end for an ending offset,
        and for a starting one fails unless startingOffsetsByTimestampStrategy is latest.
        """
        if isinstance(spec, OffsetSpec) and spec.kind in ("earliest", "latest"):
            pick = 0 if spec.kind == "earliest" else 1
            return {k: marks[k][pick] for k in keys}
        table = spec.offsets if isinstance(spec, OffsetSpec) else spec.per_partition
        if isinstance(spec, TimestampSpec) and spec.everywhere is not None:
            wanted = {k: spec.everywhere for k in keys}
        else:
            wanted = {(t, p): v for t, parts in table.items() for p, v in parts.items()}
            given, read = set(wanted), set(keys)
            if given != read:
                extra = sorted(given - read)
                missing = sorted(read - given)
                what = []
                if missing:
                    what.append("it lacks " + _names(missing))
                if extra:
                    what.append("it names " + _names(extra) + ", which the query does "
                                "not read")
                raise KafkaOptionError(f"option {option!r} must give an offset for every "
                                       f"partition read and no other: {'; '.join(what)}")
        if isinstance(spec, OffsetSpec):
            out = {}
            for key, off in wanted.items():
                out[key] = marks[key][0] if off == OFFSET_BEGINNING else \
                    marks[key][1] if off == OFFSET_END else off
            return out
        found = self.for_times(wanted)
        out = {}
        for key, off in found.items():
            if off >= 0:
                out[key] = off
            elif not starting or self.opts.timestamp_strategy_latest:
                out[key] = marks[key][1]
            else:
                raise KafkaOptionError(
                    f"option {option!r}: {key[0]} [{key[1]}] has no message at or after "
                    f"time {wanted[key]} (set startingOffsetsByTimestampStrategy to "
                    f"'latest' to start at the end instead)")
        return out


def check_range(key: Key, start: int, end: int, low: int, high: int,
                fail_on_data_loss: bool) -> Optional[Tuple[int, int]]:
    """The ``(start, end)`` to read of one partition, or None for nothing, after checking
    them against the log's ``(low, high)``.

    Offsets before the log start were deleted: an error with failOnDataLoss, otherwise the
    range starts at the log start. A range ending past the end of the log asks for
    messages that do not exist: always an error. A start past the end of the log, or past
    the range's own end, is an error with failOnDataLoss and an empty range without."""
    topic, part = key
    if end > high:
        raise KafkaOptionError(f"{topic} [{part}]: the ending offset {end} is past the end "
                               f"of the log ({high}); a batch query reads what exists")
    if start < low:
        if fail_on_data_loss:
            raise KafkaDataLossError(
                f"{topic} [{part}]: offsets {start}..{low - 1} are no longer in the log "
                f"(it starts at {low}), so they cannot be read. Set failOnDataLoss to "
                f"false to read from the log start instead.")
        start = low
    if start > end:
        if fail_on_data_loss:
            raise KafkaDataLossError(
                f"{topic} [{part}]: the starting offset {start} is after the ending offset "
                f"{end} (the log ends at {high}). Set failOnDataLoss to false to read "
                f"nothing from this partition instead.")
        return None
    return start, end


def _names(keys: Iterable[Key]) -> str:
    return ", ".join(f"{t} [{p}]" for t, p in keys)

