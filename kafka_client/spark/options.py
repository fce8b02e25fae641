"""The options of the ``kafka_native`` Spark data source, parsed and checked once.

Spark hands a data source its options as a case-insensitive mapping of strings; the names
and meanings here follow Spark's built-in Kafka source (``startingOffsets``,
``subscribePattern``, ``failOnDataLoss``, ...) so that existing queries move over by
changing the format name. ``kafka.``-prefixed options are client properties: the prefix is
removed and the rest goes to :class:`kafka_client.Consumer` or
:class:`kafka_client.Producer`, which check the names and values (librdkafka's names).

Every problem is a :class:`KafkaOptionError` naming the option and what was wrong, raised
on the driver when the query is planned, before any task starts.
"""
from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple, Union

from kafka_client.config import describe
from kafka_client.errors import KafkaException
from kafka_client.types import OFFSET_BEGINNING, OFFSET_END

__all__ = [
    "KafkaOptionError",
    "OffsetSpec",
    "ReadOptions",
    "TimestampSpec",
    "WriteOptions",
    "parse_read_options",
    "parse_write_options",
]

KAFKA_PREFIX = "kafka."

#: Spark's built-in source reads uncommitted data by default (the Java consumer's
#: default), where our client's own default is read_committed; the source follows Spark.
DEFAULT_ISOLATION = "read_uncommitted"
DEFAULT_POLL_TIMEOUT_MS = 120_000
DEFAULT_MAX_RECORDS_PER_BATCH = 50_000
#: Spark's default maxTriggerDelay: 15 minutes.
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000

_log = logging.getLogger("kafka_client.spark")

# Client properties the source sets itself: the user choosing them would break what the
# source promises (it positions every task exactly and never commits).
_RESERVED_CONSUMER = {
    "auto.offset.reset": "use startingOffsets/endingOffsets (and failOnDataLoss)",
    "enable.auto.commit": "the source never commits offsets to a group",
    "enable.auto.offset.store": "the source never commits offsets to a group",
    "enable.partition.eof": "the source needs end-of-partition events for itself",
}

# Producer properties a write cannot honour.
_RESERVED_PRODUCER = {
    "transactional.id": "the writer does not use transactions (its tasks write at least "
                        "once; see docs/spark.md)",
}

_READ_OPTIONS = {
    "subscribe", "subscribepattern", "assign",
    "startingoffsets", "endingoffsets",
    "startingtimestamp", "endingtimestamp",
    "startingoffsetsbytimestamp", "endingoffsetsbytimestamp",
    "startingoffsetsbytimestampstrategy",
    "minpartitions", "includeheaders", "failondataloss",
    "maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay",
    "kafkaconsumer.polltimeoutms", "maxrecordsperbatch",
}
# Streaming-only options that a batch query ignores with a warning, as Spark's source does
# (a query sharing its options between batch and streaming reads keeps working).
_TRIGGER_OPTIONS = {"maxoffsetspertrigger": "maxOffsetsPerTrigger",
                    "minoffsetspertrigger": "minOffsetsPerTrigger",
                    "maxtriggerdelay": "maxTriggerDelay"}
# Options Spark itself adds to a streaming query's source or sink, or that the built-in
# Kafka source accepts and that have nothing to do here; accepted and ignored.
_IGNORED_OPTIONS = {"path", "checkpointlocation", "queryname", "groupidprefix",
                    "fetchoffset.numretries", "fetchoffset.retryintervalms"}
_WRITE_OPTIONS = {"topic"}


class KafkaOptionError(ValueError):
    """An option of the ``kafka_native`` data source is missing, unknown or invalid."""


@dataclass(frozen=True)
class OffsetSpec:
    """Where a range starts or ends: ``"earliest"``, ``"latest"``, or explicit offsets per
    partition (``{topic: {partition: offset}}``, where -2 means earliest and -1 latest)."""

    kind: str                                            # "earliest" | "latest" | "json"
    offsets: Dict[str, Dict[int, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class TimestampSpec:
    """Offsets looked up by time: one time in ms for every partition (``everywhere``), or
    one per partition."""

    everywhere: Optional[int] = None
    per_partition: Dict[str, Dict[int, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class ReadOptions:
    """A read query's options, checked (see docs/spark.md for each)."""

    client: Dict[str, Any]
    subscribe: Tuple[str, ...] = ()
    subscribe_pattern: Optional[str] = None
    assign: Dict[str, Tuple[int, ...]] = field(default_factory=dict)
    starting: Union[OffsetSpec, TimestampSpec] = OffsetSpec("earliest")
    ending: Union[OffsetSpec, TimestampSpec] = OffsetSpec("latest")
    timestamp_strategy_latest: bool = False
    min_partitions: Optional[int] = None
    include_headers: bool = False
    fail_on_data_loss: bool = True
    max_offsets_per_trigger: Optional[int] = None
    min_offsets_per_trigger: Optional[int] = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    max_records_per_batch: int = DEFAULT_MAX_RECORDS_PER_BATCH

    def consumer_config(self, **overrides: Any) -> Dict[str, Any]:
        """The configuration of a consumer of this query (the source's own settings win)."""
        conf = dict(self.client)
        conf.setdefault("isolation.level", DEFAULT_ISOLATION)
        conf["enable.auto.commit"] = False
        conf["enable.auto.offset.store"] = False
        conf.update(overrides)
        return conf


@dataclass(frozen=True)
class WriteOptions:
    """A write query's options, checked."""

    client: Dict[str, Any]
    topic: Optional[str] = None

    def producer_config(self) -> Dict[str, Any]:
        conf = dict(self.client)
        # Idempotent by default: a retried request cannot duplicate or reorder what one
        # task writes (a retried *task* still writes its rows again: at least once).
        conf.setdefault("enable.idempotence", True)
        return conf


def _lower(options: Mapping[str, Any]) -> Dict[str, str]:
    # Spark lower-cases option names; a plain dict given in tests or by hand may not be.
    return {str(k).lower(): v for k, v in options.items()}


def _client_properties(opts: Dict[str, str], reserved: Dict[str, str]) -> Dict[str, Any]:
    client = {k[len(KAFKA_PREFIX):]: v for k, v in opts.items() if k.startswith(KAFKA_PREFIX)}
    if not client.get("bootstrap.servers", "").strip():
        raise KafkaOptionError(
            "option 'kafka.bootstrap.servers' is required (a comma-separated host:port "
            "list, e.g. .option('kafka.bootstrap.servers', 'localhost:9092'))")
    for name, why in reserved.items():
        if name in client:
            raise KafkaOptionError(f"option 'kafka.{name}' is not supported: {why}")
    for name in client:
        # A misspelt property fails here, on the driver, when the query is defined;
        # values are checked where each client is made.
        try:
            describe(name)
        except KafkaException as exc:
            raise KafkaOptionError(f"option 'kafka.{name}': {exc.args[0].str()}") from None
    return client


def _check_known(opts: Dict[str, str], known: set) -> None:
    for name in opts:
        if name.startswith(KAFKA_PREFIX) or name in known or name in _IGNORED_OPTIONS:
            continue
        raise KafkaOptionError(
            f"unknown option {name!r} (known: {', '.join(sorted(known))}, and "
            f"'kafka.'-prefixed client properties)")


def _bool(opts: Dict[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text in ("true", "1"):
        return True
    if text in ("false", "0"):
        return False
    raise KafkaOptionError(f"option {name!r} must be true or false, not {raw!r}")


def _int(opts: Dict[str, str], name: str, minimum: int) -> Optional[int]:
    raw = opts.get(name)
    if raw is None:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise KafkaOptionError(f"option {name!r} must be an integer, not {raw!r}") from None
    if value < minimum:
        raise KafkaOptionError(f"option {name!r} must be at least {minimum}, not {value}")
    return value


#: Spark's time units (JavaUtils.timeStringAsMs), in ms; no unit means ms.
_TIME_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000,
                  "h": 3_600_000, "d": 86_400_000}


def _duration_ms(opts: Dict[str, str], name: str, default: int) -> int:
    """A duration in Spark's form ("15m", "30s", "500ms", "2h"; a bare number is ms)."""
    raw = opts.get(name)
    if raw is None:
        return default
    match = re.fullmatch(r"(\d+)\s*([a-z]*)", str(raw).strip().lower())
    if match is None or match.group(2) not in _TIME_UNITS_MS and match.group(2):
        raise KafkaOptionError(f"option {name!r} must be a duration such as '30s', '15m' or "
                               f"'500ms' (a bare number is ms), not {raw!r}")
    return int(int(match.group(1)) * _TIME_UNITS_MS[match.group(2) or "ms"])


def _json_object(name: str, raw: str) -> Dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise KafkaOptionError(f"option {name!r}: malformed JSON ({exc}): {raw!r}") from None
    if not isinstance(value, dict) or not value:
        raise KafkaOptionError(f"option {name!r} must be a non-empty JSON object, "
                               f"not {raw!r}")
    return value


def _per_partition(name: str, raw: str) -> Dict[str, Dict[int, int]]:
    """``{"topic": {"0": 23, "1": -2}}`` with every key and value checked."""
    out: Dict[str, Dict[int, int]] = {}
    for topic, parts in _json_object(name, raw).items():
        if not isinstance(parts, dict) or not parts:
            raise KafkaOptionError(
                f"option {name!r}: topic {topic!r} must map partition numbers to offsets, "
                f'e.g. {{"{topic}": {{"0": 23}}}}, not {json.dumps(parts)}')
        table = out[topic] = {}
        for part, value in parts.items():
            try:
                index = int(part)
            except ValueError:
                index = -1
            if index < 0 or str(index) != str(part).strip():
                raise KafkaOptionError(f"option {name!r}: {topic!r} has partition {part!r}, "
                                       f"which is not a partition number")
            if isinstance(value, bool) or not isinstance(value, int):
                raise KafkaOptionError(f"option {name!r}: {topic} [{index}] has offset "
                                       f"{json.dumps(value)}, which is not an integer")
            table[index] = value
    return out


def _offset_spec(opts: Dict[str, str], name: str, allow: Tuple[str, ...],
                 allow_logical: Tuple[int, ...]) -> Optional[OffsetSpec]:
    raw = opts.get(name)
    if raw is None:
        return None
    text = str(raw).strip()
    if text.lower() in ("earliest", "latest"):
        if text.lower() not in allow:
            raise KafkaOptionError(f"option {name!r} cannot be {text.lower()!r} here "
                                   f"(allowed: {', '.join(allow)} or a JSON object)")
        return OffsetSpec(text.lower())
    offsets = _per_partition(name, text)
    for topic, parts in offsets.items():
        for part, off in parts.items():
            if off < 0 and off not in allow_logical:
                words = {OFFSET_BEGINNING: "-2 (earliest)", OFFSET_END: "-1 (latest)"}
                allowed = " or ".join(words[o] for o in allow_logical) or "nothing"
                raise KafkaOptionError(
                    f"option {name!r}: {topic} [{part}] has offset {off}; offsets must be "
                    f">= 0, or {allowed}")
    return OffsetSpec("json", offsets)


def _timestamp_spec(opts: Dict[str, str], single: str, per_partition: str
                    ) -> Optional[TimestampSpec]:
    raw = opts.get(single)
    if raw is not None:
        ts = _int(opts, single, 0)
        return TimestampSpec(everywhere=ts)
    raw = opts.get(per_partition)
    if raw is not None:
        table = _per_partition(per_partition, str(raw))
        for topic, parts in table.items():
            for part, ts in parts.items():
                if ts < 0:
                    raise KafkaOptionError(f"option {per_partition!r}: {topic} [{part}] "
                                           f"has time {ts}; times are ms since the epoch")
        return TimestampSpec(per_partition=table)
    return None


def _topic_selection(opts: Dict[str, str]) -> Tuple[Tuple[str, ...], Optional[str],
                                                    Dict[str, Tuple[int, ...]]]:
    given = [name for name in ("subscribe", "subscribepattern", "assign") if name in opts]
    if len(given) != 1:
        names = {"subscribe": "subscribe", "subscribepattern": "subscribePattern",
                 "assign": "assign"}
        if not given:
            raise KafkaOptionError("one of the options 'subscribe', 'subscribePattern' or "
                                   "'assign' is required, to say which topics to read")
        raise KafkaOptionError(f"only one of 'subscribe', 'subscribePattern' and 'assign' "
                               f"can be given; got {' and '.join(names[g] for g in given)}")
    kind = given[0]
    raw = str(opts[kind])
    if kind == "subscribe":
        # Each topic once, in the order given ("t,t" is read once, as Spark's source does)
        topics = tuple(dict.fromkeys(t.strip() for t in raw.split(",") if t.strip()))
        if not topics:
            raise KafkaOptionError(f"option 'subscribe' names no topic: {raw!r}")
        return topics, None, {}
    if kind == "subscribepattern":
        if not raw.strip():
            raise KafkaOptionError("option 'subscribePattern' is empty")
        try:
            re.compile(raw)
        except re.error as exc:
            raise KafkaOptionError(f"option 'subscribePattern': bad regular expression "
                                   f"{raw!r}: {exc}") from None
        return (), raw, {}
    assign: Dict[str, Tuple[int, ...]] = {}
    for topic, parts in _json_object("assign", raw).items():
        if not isinstance(parts, list) or not parts or not all(
                isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts):
            raise KafkaOptionError(f"option 'assign': topic {topic!r} must map to a list of "
                                   f"partition numbers, e.g. {{\"{topic}\": [0, 1]}}, not "
                                   f"{json.dumps(parts)}")
        assign[topic] = tuple(sorted(set(parts)))
    return (), None, assign


def include_headers(options: Mapping[str, Any]) -> bool:
    """The includeHeaders option, read as the reader reads it (the schema is asked for
    before the reader exists: "1" gave a schema without headers, then the reader refused
    it as one the query gave)."""
    return _bool(_lower(options), "includeheaders", False)


def parse_read_options(options: Mapping[str, Any], streaming: bool) -> ReadOptions:
    """Check a read query's options (batch, or streaming with ``streaming``)."""
    opts = _lower(options)
    _check_known(opts, _READ_OPTIONS)
    client = _client_properties(opts, _RESERVED_CONSUMER)
    subscribe, pattern, assign = _topic_selection(opts)

    if streaming:
        if "endingoffsets" in opts or "endingtimestamp" in opts \
                or "endingoffsetsbytimestamp" in opts:
            raise KafkaOptionError("ending offsets or timestamps are for batch queries; a "
                                   "streaming query reads on as data arrives")
        starting_offsets = _offset_spec(opts, "startingoffsets", ("earliest", "latest"),
                                        (OFFSET_BEGINNING, OFFSET_END))
        default_start = OffsetSpec("latest")
    else:
        # As in Spark: a batch query cannot start at "latest" or end at "earliest".
        starting_offsets = _offset_spec(opts, "startingoffsets", ("earliest",),
                                        (OFFSET_BEGINNING,))
        default_start = OffsetSpec("earliest")
    starting_ts = _timestamp_spec(opts, "startingtimestamp", "startingoffsetsbytimestamp")
    starting: Union[OffsetSpec, TimestampSpec] = \
        starting_ts or starting_offsets or default_start

    ending: Union[OffsetSpec, TimestampSpec] = OffsetSpec("latest")
    if not streaming:
        ending_offsets = _offset_spec(opts, "endingoffsets", ("latest",), (OFFSET_END,))
        ending_ts = _timestamp_spec(opts, "endingtimestamp", "endingoffsetsbytimestamp")
        ending = ending_ts or ending_offsets or OffsetSpec("latest")

    strategy = str(opts.get("startingoffsetsbytimestampstrategy", "error")).strip().lower()
    if strategy not in ("error", "latest"):
        raise KafkaOptionError("option 'startingOffsetsByTimestampStrategy' must be 'error' "
                               f"or 'latest', not {strategy!r}")

    max_per_trigger = _int(opts, "maxoffsetspertrigger", 1)
    min_per_trigger = _int(opts, "minoffsetspertrigger", 1)
    max_delay = _duration_ms(opts, "maxtriggerdelay", DEFAULT_MAX_TRIGGER_DELAY_MS)
    if min_per_trigger is not None and max_per_trigger is not None \
            and min_per_trigger > max_per_trigger:
        raise KafkaOptionError(f"option 'minOffsetsPerTrigger' ({min_per_trigger}) is higher "
                               f"than 'maxOffsetsPerTrigger' ({max_per_trigger})")
    if not streaming:
        for name, spelt in _TRIGGER_OPTIONS.items():
            if name in opts:
                _log.warning("option %r is ignored in batch queries", spelt)
        max_per_trigger = min_per_trigger = None
    poll_timeout = _int(opts, "kafkaconsumer.polltimeoutms", 1)
    batch_rows = _int(opts, "maxrecordsperbatch", 1)
    return ReadOptions(
        client=client, subscribe=subscribe, subscribe_pattern=pattern, assign=assign,
        starting=starting, ending=ending,
        timestamp_strategy_latest=strategy == "latest",
        min_partitions=_int(opts, "minpartitions", 1),
        include_headers=_bool(opts, "includeheaders", False),
        fail_on_data_loss=_bool(opts, "failondataloss", True),
        max_offsets_per_trigger=max_per_trigger,
        min_offsets_per_trigger=min_per_trigger, max_trigger_delay_ms=max_delay,
        poll_timeout_ms=DEFAULT_POLL_TIMEOUT_MS if poll_timeout is None else poll_timeout,
        max_records_per_batch=min(batch_rows or DEFAULT_MAX_RECORDS_PER_BATCH, 1_000_000))


def parse_write_options(options: Mapping[str, Any]) -> WriteOptions:
    """Check a write query's options."""
    opts = _lower(options)
    _check_known(opts, _WRITE_OPTIONS)
    client = _client_properties(opts, _RESERVED_PRODUCER)
    topic = opts.get("topic")
    if topic is not None and not str(topic).strip():
        raise KafkaOptionError("option 'topic' is empty")
    return WriteOptions(client=client, topic=None if topic is None else str(topic).strip())
