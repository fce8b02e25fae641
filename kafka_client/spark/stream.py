"""Streaming read: ``spark.readStream.format("kafka_native")``.

The stream offset is the next offset to read of every partition, as JSON
``{"topic": {"0": 1200, "1": 1187}}`` (the shape of Spark's own Kafka source). Spark
writes it to the checkpoint before a micro-batch runs, and a restarted query replans the
micro-batch that was not committed from those same offsets, so every offset is read into
exactly one committed micro-batch. Each micro-batch's ranges are read by the executors as
in a batch query (:func:`~kafka_client.spark.reader.read_range`).

Spark does not write a query's starting offsets to the checkpoint (only each
micro-batch's end): a restart replans an uncommitted first micro-batch from
``initialOffset()`` called again. Spark's own Kafka source keeps them in a file of the
checkpoint; a Python source is not told where the checkpoint is. So starting offsets that
depend on the moment (``latest``, -1, a time with the ``latest`` strategy) are not
resolved by ``initialOffset()``: it returns a placeholder, the first ``latestOffset()``
resolves it, and the first micro-batch reads nothing, so the resolved offsets are that
micro-batch's end, which Spark does write to the checkpoint.
"""
from __future__ import annotations

import logging
import math
import time
from typing import Any, Dict, Iterator, Optional, Sequence

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadLimit, ReadMaxRows,
                                              ReadMinRows, SupportsTriggerAvailableNow)
from pyspark.sql.types import StructType

from kafka_client import KafkaException, TopicPartition
from kafka_client.types import OFFSET_END

from .offsets import (Key, KafkaDataLossError, OffsetRange, Planner, offsets_from_json,
                      offsets_to_json, split_ranges)
from .options import OffsetSpec, ReadOptions, TimestampSpec
from .reader import read_range
from .schema import arrow_schema

__all__ = ["KafkaStreamReader", "rate_limit"]

#: The key of the placeholder start offset (see the module docstring); "@" is in no topic
#: name, so no stream offset of a real partition has it.
PENDING = "@startingOffsets"

_log = logging.getLogger("kafka_client.spark")


def rate_limit(start: Dict[Key, int], end: Dict[Key, int], max_rows: int) -> Dict[Key, int]:
    """``end`` cut down so that about ``max_rows`` offsets are read in all, shared among
    the partitions in proportion to what each has waiting (a partition with anything
    waiting gets at least one), as Spark's Kafka source does for maxOffsetsPerTrigger."""
    lag = {k: end[k] - start[k] for k in end if end[k] > start[k]}
    total = sum(lag.values())
    if total <= max_rows:
        return dict(end)
    out = dict(end)
    for key, waiting in lag.items():
        share = waiting * max_rows / total
        take = math.floor(share) if share >= 1 else math.ceil(share)
        out[key] = start[key] + min(waiting, take)
    return out


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over the selected partitions (see the module docstring).

    Partitions that appear while the query runs (a new topic matching
    ``subscribePattern``, a subscribed topic created late, partitions added) are read from
    their earliest offset. ``maxOffsetsPerTrigger`` bounds each micro-batch;
    ``minOffsetsPerTrigger`` holds a micro-batch back until that many offsets wait or
    ``maxTriggerDelay`` has passed since the last one (both ignored by Trigger.Once, which
    reads everything, and the minimum by Trigger.AvailableNow, which would stop early).
    ``Trigger.AvailableNow`` reads up to the offsets current when the query starts.
    With ``kafka.group.id``, :meth:`commit` also commits each finished micro-batch's
    offsets to that group (for monitoring; the checkpoint decides where a query resumes).
    """

    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self._planner: Optional[Planner] = None
        self._target: Optional[Dict[Key, int]] = None   # Trigger.AvailableNow's end
        self._latest: Optional[Dict[Key, int]] = None
        self._last_trigger_ms = 0.0   # when latestOffset last let a micro-batch through

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state["_planner"] = None   # a live consumer is not sent anywhere
        return state

    def _plan(self) -> Planner:
        if self._planner is None:
            self._planner = Planner(self.opts)
        return self._planner

    # -- offsets ---------------------------------------------------------------------------
    def initialOffset(self) -> dict:
        if self._starts_at_the_moment():
            return {PENDING: "resolved by the first micro-batch, which reads nothing"}
        return offsets_to_json(self._starting_offsets())

    def _starts_at_the_moment(self) -> bool:
        """Whether the starting offsets name the end of the log as it is when resolved
        (so that resolving them again on a restart would give other offsets)."""
        spec = self.opts.starting
        if isinstance(spec, TimestampSpec):
            return self.opts.timestamp_strategy_latest
        return spec.kind == "latest" or any(
            off == OFFSET_END for parts in spec.offsets.values() for off in parts.values())

    def _starting_offsets(self) -> Dict[Key, int]:
        planner = self._plan()
        keys = planner.partitions(must_exist=False)
        marks = planner.watermarks(keys)
        spec = self.opts.starting
        name = "startingOffsets" if isinstance(spec, OffsetSpec) else "startingTimestamp"
        return planner.resolve(spec, keys, marks, name, True)

    def getDefaultReadLimit(self) -> ReadLimit:
        # Spark hands this limit back to latestOffset, except under Trigger.Once, where it
        # hands ReadAllAvailable: a minimum (with or without a maximum, which Python's limits
        # cannot combine) is therefore announced as ReadMinRows and applied from the options.
        if self.opts.min_offsets_per_trigger is not None:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        planner = self._plan()
        keys = planner.partitions(must_exist=False)
        self._target = {k: high for k, (_low, high) in planner.watermarks(keys).items()}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        if PENDING in start:
            # The first micro-batch: its end is the starting offsets, resolved now.
            first = self._starting_offsets()
            if self._target is not None:
                first = {k: min(v, self._target[k]) for k, v in first.items()
                         if k in self._target}
            self._latest = dict(first)
            return offsets_to_json(first)
        planner = self._plan()
        begin = offsets_from_json(start)
        keys = planner.partitions(must_exist=False)
        marks = planner.watermarks(keys)
        ends = {k: marks[k][1] for k in keys}
        self._latest = dict(ends)
        if self._target is not None:
            # Nothing past the offsets of the query's start; partitions found since then
            # are not read in this run.
            ends = {k: min(v, self._target[k]) for k, v in ends.items() if k in self._target}
        froms = {k: begin.get(k, marks[k][0]) for k in ends}
        if not isinstance(limit, ReadAllAvailable):
            if self._target is None and self._hold_back(froms, ends):
                return start   # no new micro-batch yet
            if self.opts.max_offsets_per_trigger is not None:
                ends = rate_limit(froms, ends, self.opts.max_offsets_per_trigger)
        # A partition no longer there (its topic deleted) is left out: partitions() then
        # sees it gone, as Spark's source does (it kept its old offset, and what it had
        # not read yet was skipped without a word).
        out = {k: v for k, v in begin.items() if k in marks}
        out.update(ends)
        return offsets_to_json(out)

    def _hold_back(self, froms: Dict[Key, int], ends: Dict[Key, int]) -> bool:
        """minOffsetsPerTrigger and maxTriggerDelay, as Spark's source applies them: a
        micro-batch waits while fewer offsets than the minimum are available, unless
        maxTriggerDelay has passed since the last micro-batch (the first one never waits)."""
        minimum = self.opts.min_offsets_per_trigger
        if minimum is None:
            return False
        now = time.time() * 1000
        if now - self._last_trigger_ms < self.opts.max_trigger_delay_ms:
            waiting = sum(max(0, ends[k] - froms[k]) for k in ends)
            if waiting < minimum:
                return True
        self._last_trigger_ms = now
        return False

    def reportLatestOffset(self) -> Optional[dict]:
        return None if self._latest is None else offsets_to_json(self._latest)

    # -- micro-batches ---------------------------------------------------------------------
    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        if PENDING in start:
            return []   # the first micro-batch only fixes where the query starts
        begin = offsets_from_json(start)
        until = offsets_from_json(end)
        gone = sorted(k for k in begin if k not in until)
        if gone:
            names = ", ".join(f"{t} [{p}]" for t, p in gone[:10])
            if self.opts.fail_on_data_loss:
                raise KafkaDataLossError(
                    f"{names} are gone (topic deleted?): some data may have been missed. "
                    f"Set failOnDataLoss to false to go on without them.")
            _log.warning("%s are gone (topic deleted?): some data may have been missed",
                         names)
        for key, stop in until.items():
            if key in begin and stop < begin[key]:
                # The end is before where the query stands: a startingOffsets past the end
                # of the log, or the topic deleted and created again. Spark's source cannot
                # tell them apart either: it fails, or warns and goes on from the end (its
                # range for this micro-batch is empty).
                what = (f"{key[0]} [{key[1]}]: the log ends at {stop}, before offset "
                        f"{begin[key]} where this query stands (a starting offset past the "
                        f"end of the log, or the topic deleted and created again?): some "
                        f"data may have been missed")
                if self.opts.fail_on_data_loss:
                    raise KafkaDataLossError(f"{what}. Set failOnDataLoss to false to go on "
                                             f"from the end of the log instead.")
                _log.warning("%s; going on from offset %d", what, stop)
                begin[key] = stop
        fresh = [k for k in until if k not in begin]
        if fresh:
            # Appeared since the last micro-batch: from the earliest offset.
            lows = self._plan().watermarks(fresh)
            begin.update({k: lows[k][0] for k in fresh})
            late = sorted(k for k in fresh if lows[k][0] > 0)
            if late:
                # Records of it were deleted before the query saw it, as Spark's source
                # reports a new partition that does not start from 0.
                what = ", ".join(f"{t} [{p}] starts at {lows[(t, p)][0]}"
                                 for t, p in late[:10])
                what = (f"added partitions do not start at offset 0 ({what}): some data "
                        f"may have been missed")
                if self.opts.fail_on_data_loss:
                    raise KafkaDataLossError(f"{what}. Set failOnDataLoss to false to read "
                                             f"them from their earliest offset instead.")
                _log.warning("%s", what)
        ranges = [OffsetRange(key[0], key[1], begin[key], stop)
                  for key, stop in sorted(until.items())]
        return split_ranges(ranges, self.opts.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, OffsetRange)
        return read_range(partition, self.opts, arrow_schema(self.schema))

    def commit(self, end: dict) -> None:
        if "group.id" not in self.opts.client:
            return
        offsets = [TopicPartition(t, p, off) for (t, p), off in
                   sorted(offsets_from_json(end).items())]
        if not offsets:
            return
        try:
            self._plan().consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            # Informational only: the checkpoint, not the group, is where the query
            # resumes, so a failed commit must not stop it.
            _log.warning("committing offsets to group %r failed: %s",
                         self.opts.client["group.id"], exc.args[0].str())

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()
            self._planner = None
