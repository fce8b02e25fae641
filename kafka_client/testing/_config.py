"""The broker and topic properties the test cluster knows, under Kafka's names.

Each property has its Kafka default (a few broker defaults are changed to suit tests,
marked ``# test default``), a type, and a check. A topic property may name the broker
property that supplies its default (``log.segment.bytes`` for ``segment.bytes``), as in
Kafka. Names the cluster does not implement are refused with a message naming them,
never accepted and ignored.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from kafka_proto.records import Compression

__all__ = [
    "ConfigError",
    "ConfigDef",
    "TOPIC_CONFIGS",
    "BROKER_CONFIGS",
    "BrokerSettings",
    "TopicSettings",
    "resolve_broker_config",
    "resolve_topic_config",
]

_DAY_MS = 24 * 3600 * 1000
#: The SASL mechanisms the cluster implements (kafka_client.testing._sasl).
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI")
#: The server-side assignors of consumer groups (kafka_client.testing._consumer_groups).
CONSUMER_ASSIGNORS = ("uniform", "range")
#: ``replica.selector.class`` values naming Kafka's rack-aware selector (KIP-392): its
#: class name, or "rack" for short.
RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
_REPLICA_SELECTORS = ("", RACK_AWARE_SELECTOR, "rack")
_LONG_MAX = (1 << 63) - 1
#: compression.type values: the leader keeps the producer's batches ("producer") or
#: writes them again with this codec, as Kafka's LogValidator
COMPRESSION_TYPES = {"producer": None, "uncompressed": Compression.NONE,
                     "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
                     "lz4": Compression.LZ4, "zstd": Compression.ZSTD}


class ConfigError(ValueError):
    """A property name that is unknown or a value that is invalid (the message names it)."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name


@dataclass(frozen=True)
class ConfigDef:
    name: str
    kind: str                     # "int", "long", "bool", "str", "list", "double"
    default: Any
    check: Optional[Callable[[Any], Optional[str]]] = None   # returns an error message
    broker_synonym: Optional[str] = None
    sensitive: bool = False


def _at_least(n: float) -> Callable[[Any], Optional[str]]:
    return lambda v: None if v >= n else f"must be at least {n}"


def _one_of(*values: str) -> Callable[[Any], Optional[str]]:
    return lambda v: None if v in values else f"must be one of {', '.join(values)}"


def _policy(v: Any) -> Optional[str]:
    # Empty is Kafka's too (what SUBTRACT of the last policy leaves): neither deleted
    # nor compacted, the log kept whole.
    if any(p not in ("delete", "compact") for p in _as_list(v)):
        return "must be a list of delete and/or compact"
    return None


def _only(value: Any, why: str) -> Callable[[Any], Optional[str]]:
    return lambda v: None if v == value else f"only {value!r} is supported ({why})"


def _within(low: int, high: int, *also: int) -> Callable[[Any], Optional[str]]:
    extra = "".join(f" or {v}" for v in also)
    return lambda v: None if low <= v <= high or v in also else \
        f"must be within {low}..{high}{extra}"


#: KIP-390: the level the leader compresses with when it writes a batch again in the
#: topic's codec (compression.type names another than the producer's): Kafka's defaults
#: and ranges (gzip -1 is zlib's default, 6; lz4 9 is lz4's fast mode, Kafka's
#: fastCompressor, any other level its high compression).
_LEVELS = [
    ("compression.gzip.level", -1, _within(1, 9, -1)),
    ("compression.lz4.level", 9, _within(1, 17)),
    ("compression.zstd.level", 3, _within(-131072, 22)),
]
#: compression.lz4.level's default, compressed in lz4's fast mode as Kafka does
LZ4_FAST_LEVEL = 9


_TOPIC = [
    ConfigDef("cleanup.policy", "list", "delete", _policy, "log.cleanup.policy"),
    ConfigDef("compression.type", "str", "producer", _one_of(*COMPRESSION_TYPES),
              "compression.type"),
    *(ConfigDef(name, "int", default, check, name) for name, default, check in _LEVELS),
    ConfigDef("delete.retention.ms", "long", _DAY_MS, _at_least(0),
              "log.cleaner.delete.retention.ms"),
    # Kafka waits this long before removing a deleted segment's files; the cluster removes
    # them at once (no client sees the difference): the property is kept and described.
    ConfigDef("file.delete.delay.ms", "long", 60000, _at_least(0),
              "log.segment.delete.delay.ms"),
    ConfigDef("index.interval.bytes", "int", 4096, _at_least(0), "log.index.interval.bytes"),
    ConfigDef("max.message.bytes", "int", 1048588, _at_least(0), "message.max.bytes"),
    ConfigDef("message.timestamp.type", "str", "CreateTime",
              _one_of("CreateTime", "LogAppendTime"), "log.message.timestamp.type"),
    ConfigDef("min.cleanable.dirty.ratio", "double", 0.5,
              lambda v: None if 0 <= v <= 1 else "must be within 0..1",
              "log.cleaner.min.cleanable.ratio"),
    ConfigDef("min.compaction.lag.ms", "long", 0, _at_least(0),
              "log.cleaner.min.compaction.lag.ms"),
    ConfigDef("min.insync.replicas", "int", 1, _at_least(1), "min.insync.replicas"),
    ConfigDef("retention.bytes", "long", -1, None, "log.retention.bytes"),
    ConfigDef("retention.ms", "long", 7 * _DAY_MS, _at_least(-1), "log.retention.ms"),
    ConfigDef("segment.bytes", "int", 1 << 30, _at_least(100), "log.segment.bytes"),
    ConfigDef("segment.ms", "long", 7 * _DAY_MS, _at_least(1), "log.roll.ms"),
    ConfigDef("unclean.leader.election.enable", "bool", False,
              _only(False, "leaders are elected from the ISR only"),
              "unclean.leader.election.enable"),
]

_BROKER = [
    ConfigDef("auto.create.topics.enable", "bool", True),
    # the authorizer's (Cluster(authorizer=True)): a resource without ACLs is everyone's
    ConfigDef("allow.everyone.if.no.acl.found", "bool", False),
    ConfigDef("num.partitions", "int", 1, _at_least(1)),
    # test default: Kafka's is 1; a multi-broker test cluster replicates by default
    # (the cluster lowers it to the number of brokers).
    ConfigDef("default.replication.factor", "int", 3, _at_least(1)),
    ConfigDef("min.insync.replicas", "int", 1, _at_least(1)),
    ConfigDef("message.max.bytes", "int", 1048588, _at_least(0)),
    ConfigDef("socket.request.max.bytes", "int", 104857600, _at_least(1024)),
    # Kafka's: connections without a byte in or out for this long are closed (-1: never).
    ConfigDef("connections.max.idle.ms", "long", 600_000),
    ConfigDef("log.cleanup.policy", "list", "delete", _policy),
    ConfigDef("compression.type", "str", "producer", _one_of(*COMPRESSION_TYPES)),
    *(ConfigDef(name, "int", default, check) for name, default, check in _LEVELS),
    ConfigDef("log.cleaner.delete.retention.ms", "long", _DAY_MS, _at_least(0)),
    ConfigDef("log.index.interval.bytes", "int", 4096, _at_least(0)),
    ConfigDef("log.segment.delete.delay.ms", "long", 60000, _at_least(0)),
    ConfigDef("log.message.timestamp.type", "str", "CreateTime",
              _one_of("CreateTime", "LogAppendTime")),
    ConfigDef("log.cleaner.min.cleanable.ratio", "double", 0.5,
              lambda v: None if 0 <= v <= 1 else "must be within 0..1"),
    ConfigDef("log.cleaner.min.compaction.lag.ms", "long", 0, _at_least(0)),
    ConfigDef("log.retention.bytes", "long", -1),
    ConfigDef("log.retention.ms", "long", 7 * _DAY_MS, _at_least(-1)),
    ConfigDef("log.segment.bytes", "int", 1 << 30, _at_least(100)),
    ConfigDef("log.roll.ms", "long", 7 * _DAY_MS, _at_least(1)),
    ConfigDef("unclean.leader.election.enable", "bool", False,
              _only(False, "see the topic property")),
    # test default: Kafka checks every 5 minutes (retention) and backs off 15 s (cleaner).
    ConfigDef("log.retention.check.interval.ms", "long", 1000, _at_least(1)),
    ConfigDef("log.cleaner.backoff.ms", "long", 1000, _at_least(1)),
    ConfigDef("log.cleaner.enable", "bool", True),
    # test default: Kafka's is 30 s.
    ConfigDef("replica.lag.time.max.ms", "long", 10_000, _at_least(1)),
    ConfigDef("replica.fetch.wait.max.ms", "int", 500, _at_least(0)),
    ConfigDef("replica.fetch.max.bytes", "int", 1048576, _at_least(0)),
    # test default: Kafka waits 3 s for more members before the first rebalance.
    ConfigDef("group.initial.rebalance.delay.ms", "int", 0, _at_least(0)),
    ConfigDef("group.min.session.timeout.ms", "int", 6000, _at_least(0)),
    ConfigDef("group.max.session.timeout.ms", "int", 1800000, _at_least(0)),
    # The KIP-848 consumer groups (kafka_client.testing._consumer_groups). The assignors
    # are the built-in ones by name; the first is the default.
    ConfigDef("group.consumer.assignors", "list", "uniform,range",
              lambda v: None if _as_list(v) and all(a in CONSUMER_ASSIGNORS for a in _as_list(v))
              else f"must be a list of {', '.join(CONSUMER_ASSIGNORS)}"),
    ConfigDef("group.consumer.heartbeat.interval.ms", "int", 5000, _at_least(1)),
    ConfigDef("group.consumer.session.timeout.ms", "int", 45000, _at_least(1)),
    ConfigDef("group.consumer.max.size", "int", (1 << 31) - 1, _at_least(1)),
    # test default: Kafka 4's lets groups with members change protocol (online upgrade
    # and downgrade); the cluster converts only empty groups, as Kafka does with "disabled".
    ConfigDef("group.consumer.migration.policy", "str", "disabled",
              _only("disabled", "groups with members never change protocol")),
    # KIP-932 share groups (kafka_client.testing._share_groups). Kafka bounds the lock
    # duration to 15-60 s and the delivery limit to 2-10; a test wants them shorter.
    ConfigDef("group.share.heartbeat.interval.ms", "int", 5000, _at_least(1)),
    ConfigDef("group.share.session.timeout.ms", "int", 45000, _at_least(1)),
    ConfigDef("group.share.record.lock.duration.ms", "int", 30000, _at_least(1)),
    ConfigDef("group.share.delivery.count.limit", "int", 5, _at_least(1)),
    ConfigDef("group.share.max.size", "int", 200, _at_least(1)),
    ConfigDef("transaction.max.timeout.ms", "int", 900000, _at_least(1)),
    ConfigDef("sasl.enabled.mechanisms", "list", "",
              lambda v: None if all(m in SASL_MECHANISMS for m in _as_list(v)) else
              f"must be a list of {', '.join(SASL_MECHANISMS)}"),
    # KIP-368: the longest SASL session before re-authentication (0: no limit).
    ConfigDef("connections.max.reauth.ms", "long", 0, _at_least(0)),
    # KIP-392: how a partition leader picks the replica a consumer should fetch from.
    # Empty (Kafka's default): none, consumers fetch from the leader.
    ConfigDef("replica.selector.class", "str", "",
              lambda v: None if v.strip() in _REPLICA_SELECTORS else
              f"must be empty, {RACK_AWARE_SELECTOR} or rack"),
    # KIP-227: the incremental fetch sessions each broker keeps (0: none, every Fetch is
    # answered sessionless).
    ConfigDef("max.incremental.fetch.session.cache.slots", "int", 1000, _at_least(0)),
    # Not a Kafka property: Kafka's brokers fix this at 2 minutes (how long a session must
    # be idle, or have lived, before a new one may take its place); tests shorten it.
    ConfigDef("min.incremental.fetch.session.eviction.ms", "long", 120_000, _at_least(0)),
    # Not a Kafka property: the brokers also serve the API versions Kafka 4 removed
    # (KIP-896), as a Kafka 3.x broker does, to stand for a Kafka 0.10-2.0 broker (a fault
    # proxy lowers the highest versions): Produce 0-2 (message sets, stored as v2 batches),
    # Fetch 0-3 (down-converted message sets),
    # ListOffsets 0, OffsetCommit 0-1, OffsetFetch 0, CreateTopics 0-1, DeleteTopics 0,
    # OffsetForLeaderEpoch 0-1, DescribeConfigs 0.
    ConfigDef("legacy.api.versions.enable", "bool", False),
]

TOPIC_CONFIGS: Dict[str, ConfigDef] = {c.name: c for c in _TOPIC}
BROKER_CONFIGS: Dict[str, ConfigDef] = {c.name: c for c in _BROKER}


def _as_list(v: Any) -> Tuple[str, ...]:
    if isinstance(v, str):
        return tuple(p.strip() for p in v.split(",") if p.strip())
    return tuple(v)


def _parse(d: ConfigDef, raw: Any) -> Any:
    try:
        if d.kind in ("int", "long"):
            if isinstance(raw, bool):
                raise ValueError
            value: Any = int(raw)
            limit = _LONG_MAX if d.kind == "long" else (1 << 31) - 1
            if not -limit - 1 <= value <= limit:
                raise ValueError
        elif d.kind == "double":
            value = float(raw)
        elif d.kind == "bool":
            if isinstance(raw, bool):
                value = raw
            elif str(raw).lower() in ("true", "false"):
                value = str(raw).lower() == "true"
            else:
                raise ValueError
        elif d.kind == "list":
            value = ",".join(_as_list(raw))
        else:
            value = str(raw)
    except (TypeError, ValueError):
        raise ConfigError(d.name, f"invalid {d.kind} value {raw!r}") from None
    if d.check is not None:
        problem = d.check(value)
        if problem:
            raise ConfigError(d.name, f"{problem} (got {raw!r})")
    return value


def to_text(value: Any) -> str:
    """A property value as Kafka shows it (DescribeConfigs)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def resolve_broker_config(overrides: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """Every broker property: defaults with ``overrides`` applied and checked."""
    values = {name: d.default for name, d in BROKER_CONFIGS.items()}
    for name, raw in (overrides or {}).items():
        d = BROKER_CONFIGS.get(name)
        if d is None:
            raise ConfigError(name, "unknown or unsupported broker property; the test "
                              f"cluster knows {', '.join(sorted(BROKER_CONFIGS))}")
        values[name] = _parse(d, raw)
    if (values["group.consumer.heartbeat.interval.ms"]
            >= values["group.consumer.session.timeout.ms"]):
        raise ConfigError("group.consumer.heartbeat.interval.ms",
                          "must be less than group.consumer.session.timeout.ms "
                          f"({values['group.consumer.session.timeout.ms']})")
    return values


def resolve_topic_config(broker: Mapping[str, Any],
                         overrides: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """Every topic property: broker-level defaults with the topic's ``overrides``."""
    values = {}
    for name, d in TOPIC_CONFIGS.items():
        values[name] = broker.get(d.broker_synonym, d.default) if d.broker_synonym else d.default
    for name, raw in (overrides or {}).items():
        known = TOPIC_CONFIGS.get(name)
        if known is None:
            raise ConfigError(name, "unknown or unsupported topic property; the test "
                              f"cluster knows {', '.join(sorted(TOPIC_CONFIGS))}")
        values[name] = _parse(known, raw)
    return values


@dataclass
class TopicSettings:
    """The topic properties the log and the replication layer act on, parsed."""

    cleanup_delete: bool
    cleanup_compact: bool
    #: compression.type: the codec the leader writes batches with (None: the producer's)
    compression: Optional[Compression]
    #: the level it writes them with: compression.gzip/lz4/zstd.level of that codec, as
    #: the codec takes it (None: the codec's default, or a codec without levels)
    compression_level: Optional[int]
    delete_retention_ms: int
    index_interval_bytes: int
    max_message_bytes: int
    #: message.timestamp.type=LogAppendTime: the leader stamps each batch with its clock.
    log_append_time: bool
    min_cleanable_dirty_ratio: float
    min_compaction_lag_ms: int
    min_insync_replicas: int
    retention_bytes: int
    retention_ms: int
    segment_bytes: int
    segment_ms: int

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> "TopicSettings":
        policy = _as_list(values["cleanup.policy"])
        compression = COMPRESSION_TYPES[values["compression.type"]]
        return cls(
            cleanup_delete="delete" in policy,
            cleanup_compact="compact" in policy,
            compression=compression,
            compression_level=_codec_level(compression, values),
            delete_retention_ms=values["delete.retention.ms"],
            index_interval_bytes=values["index.interval.bytes"],
            max_message_bytes=values["max.message.bytes"],
            log_append_time=values["message.timestamp.type"] == "LogAppendTime",
            min_cleanable_dirty_ratio=values["min.cleanable.dirty.ratio"],
            min_compaction_lag_ms=values["min.compaction.lag.ms"],
            min_insync_replicas=values["min.insync.replicas"],
            retention_bytes=values["retention.bytes"],
            retention_ms=values["retention.ms"],
            segment_bytes=values["segment.bytes"],
            segment_ms=values["segment.ms"],
        )

    @classmethod
    def defaults(cls) -> "TopicSettings":
        return cls.from_values(resolve_topic_config({}, None))


def _codec_level(codec: Optional[Compression], values: Mapping[str, Any]) -> Optional[int]:
    # The topic's level for its codec, as kafka_proto.compression.compress takes it.
    if codec == Compression.GZIP:
        level: int = values["compression.gzip.level"]
        return None if level == -1 else level
    if codec == Compression.LZ4:
        level = values["compression.lz4.level"]
        return None if level == LZ4_FAST_LEVEL else level
    if codec == Compression.ZSTD:
        return values["compression.zstd.level"]
    return None


@dataclass
class BrokerSettings:
    """The broker properties, parsed (one set for the whole cluster)."""

    values: Dict[str, Any]

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    @property
    def sasl_mechanisms(self) -> Tuple[str, ...]:
        return _as_list(self.values["sasl.enabled.mechanisms"])

    @property
    def rack_aware_selector(self) -> bool:
        """``replica.selector.class`` names the rack-aware selector (KIP-392)."""
        return self.values["replica.selector.class"].strip() != ""

    @property
    def consumer_assignors(self) -> Tuple[str, ...]:
        """The consumer groups' server-side assignors, the default first."""
        return _as_list(self.values["group.consumer.assignors"])
