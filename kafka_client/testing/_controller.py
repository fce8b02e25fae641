"""The cluster's controller: topics, replica placement, leaders, leader epochs and ISRs.

One controller serves every broker of the process, so metadata changes reach all brokers
at once (what a KRaft quorum does in milliseconds). Brokers change ISRs through it (the
AlterPartition a leader sends), and it elects a new leader from the live ISR when a leader
goes down or a test moves it, bumping the leader epoch every time.

Replicas are placed as Kafka places them without racks: partition ``p``'s first replica
is broker ``(p + start) % n`` of the sorted live brokers, the others follow it at a shift
that grows by one every ``n`` partitions, so leaders and followers spread evenly.
"""
from __future__ import annotations

import dataclasses
import itertools
import os
import resource
import uuid
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from kafka_proto.errors import ErrorCode

from ._acls import AclStore
from ._config import ConfigError, TopicSettings, resolve_topic_config

if TYPE_CHECKING:  # pragma: no cover
    from ._server import ClusterServer

__all__ = ["PartitionInfo", "TopicInfo", "Controller", "ControllerError", "place_replicas"]

_TOPIC_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
_MAX_TOPIC_NAME = 249

#: Files a new replica keeps open: its first segment's log, offset index and time index.
FILES_PER_REPLICA = 3
#: Descriptors kept free, whatever the topics, for connections and checkpoints (at most
#: a quarter of the limit).
RESERVED_FILES = 1024


def free_descriptors() -> Optional[Tuple[int, int]]:
    """``(free, limit)``: descriptors this process may still open under its soft
    RLIMIT_NOFILE; None where the open ones cannot be counted (no /proc)."""
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if limit == resource.RLIM_INFINITY:
        return None
    try:
        in_use = len(os.listdir("/proc/self/fd"))
    except OSError:
        return None
    return limit - in_use, limit


class ControllerError(Exception):
    """A metadata change refused: carries the Kafka error code and a message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class PartitionInfo:
    topic: str
    index: int
    replicas: List[int]
    leader: int
    leader_epoch: int
    isr: List[int]
    partition_epoch: int = 0
    #: The high watermark last reported by a leader: what every in-sync replica has.
    high_watermark: int = 0

    @property
    def key(self) -> Tuple[str, int]:
        return self.topic, self.index


@dataclass
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: List[PartitionInfo]
    overrides: Dict[str, Any]
    settings: TopicSettings
    values: Dict[str, Any] = field(default_factory=dict)
    internal: bool = False


def place_replicas(brokers: Sequence[int], partitions: int, replication_factor: int,
                   start: int, first_partition: int = 0) -> List[List[int]]:
    """Kafka's rack-unaware assignment (see the module docstring)."""
    n = len(brokers)
    shift = start % n if n > 1 else 0
    out = []
    for p in range(first_partition, first_partition + partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            step = 1 + (shift + j) % (n - 1)
            replicas.append(brokers[(first + step) % n])
        out.append(replicas)
    return out


def check_topic_name(name: str) -> None:
    if not name or name in (".", ".."):
        raise ControllerError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"invalid topic name {name!r}")
    if len(name) > _MAX_TOPIC_NAME:
        raise ControllerError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                              f"topic name is {len(name)} characters, the limit is 249")
    if not set(name) <= _TOPIC_NAME_CHARS:
        raise ControllerError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                              f"topic name {name!r} has characters other than "
                              "ASCII letters, digits, '.', '_' and '-'")


class Controller:
    """Topic and partition metadata of the whole cluster."""

    def __init__(self, server: "ClusterServer") -> None:
        self.server = server
        self.topics: Dict[str, TopicInfo] = {}
        self.topics_by_id: Dict[uuid.UUID, TopicInfo] = {}
        self._placement_start = itertools.count()
        #: Coordinator placement overrides: (key type, key) -> broker id.
        self.coordinator_overrides: Dict[Tuple[int, str], int] = {}
        #: The cluster's ACLs (CreateAcls, DeleteAcls), kept with its other metadata.
        self.acls = AclStore()

    # -- queries ---------------------------------------------------------------------
    def live_brokers(self) -> List[int]:
        return sorted(b.broker_id for b in self.server.brokers.values() if b.up)

    def partition(self, topic: str, index: int) -> Optional[PartitionInfo]:
        info = self.topics.get(topic)
        if info is None or not 0 <= index < len(info.partitions):
            return None
        return info.partitions[index]

    def all_partitions(self) -> Iterator[PartitionInfo]:
        for info in self.topics.values():
            yield from info.partitions

    def coordinator(self, key_type: int, key: str) -> int:
        """The broker coordinating a group or a transactional id (by key type): a fixed
        hash of the key over the brokers, the next live one if that is down, unless a
        test moved it."""
        override = self.coordinator_overrides.get((key_type, key))
        live = self.live_brokers()
        if override is not None and override in live:
            return override
        ids = sorted(self.server.brokers)
        if not live:
            return -1
        start = zlib.crc32(key.encode("utf-8")) % len(ids)
        for i in range(len(ids)):
            candidate = ids[(start + i) % len(ids)]
            if candidate in live:
                return candidate
        return -1

    # -- topics ----------------------------------------------------------------------
    def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                     assignments: Optional[Mapping[int, Sequence[int]]] = None,
                     configs: Optional[Mapping[str, Any]] = None,
                     validate_only: bool = False, internal: bool = False) -> TopicInfo:
        """Create a topic (ControllerError with the Kafka code if refused)."""
        check_topic_name(name)
        if name in self.topics:
            raise ControllerError(ErrorCode.TOPIC_ALREADY_EXISTS,
                                  f"topic {name!r} already exists")
        broker_values = self.server.settings.values
        if assignments and (num_partitions != -1 or replication_factor != -1):
            raise ControllerError(ErrorCode.INVALID_REQUEST,
                                  "with replica assignments, the number of partitions and "
                                  "the replication factor must be -1")
        if num_partitions == -1:
            num_partitions = broker_values["num.partitions"]
        if replication_factor == -1:
            replication_factor = min(broker_values["default.replication.factor"],
                                     len(self.server.brokers))
        live = self.live_brokers()
        if assignments:
            placement = []
            for p in range(len(assignments)):
                if p not in assignments:
                    raise ControllerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                          f"no assignment for partition {p}")
                replicas = list(assignments[p])
                if not replicas or len(set(replicas)) != len(replicas) or \
                        any(r not in self.server.brokers for r in replicas):
                    raise ControllerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                          f"invalid replicas {replicas} for partition {p}")
                placement.append(replicas)
        else:
            if num_partitions <= 0:
                raise ControllerError(
                    ErrorCode.INVALID_PARTITIONS,
                    f"number of partitions must be positive, got {num_partitions}")
            if replication_factor <= 0:
                raise ControllerError(
                    ErrorCode.INVALID_REPLICATION_FACTOR,
                    f"replication factor must be positive, got {replication_factor}")
            if replication_factor > len(live):
                raise ControllerError(
                    ErrorCode.INVALID_REPLICATION_FACTOR,
                    f"replication factor {replication_factor} is larger than the "
                    f"{len(live)} available brokers")
            placement = place_replicas(live, num_partitions, replication_factor,
                                       next(self._placement_start))
        try:
            values = resolve_topic_config(broker_values, configs)
        except ConfigError as exc:
            raise ControllerError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        settings = TopicSettings.from_values(values)
        self._check_open_files(placement, f"topic {name!r}")
        if validate_only:
            return TopicInfo(name, uuid.uuid4(), [], dict(configs or {}), settings, values)
        info = TopicInfo(name, uuid.uuid4(), [], dict(configs or {}), settings, values, internal)
        for p, replicas in enumerate(placement):
            isr = [r for r in replicas if r in live]
            leader = isr[0] if isr else -1
            info.partitions.append(PartitionInfo(name, p, replicas, leader, 0, isr))
        self.topics[name] = info
        self.topics_by_id[info.topic_id] = info
        try:
            for broker in self.server.brokers.values():
                broker.on_topic_created(info)
        except OSError as exc:
            self.delete_topic(name)    # closes and removes what was opened
            raise ControllerError(ErrorCode.KAFKA_STORAGE_ERROR,
                                  f"cannot open the logs of topic {name!r}: {exc}") from None
        self.server.topics_changed()
        return info

    def _check_open_files(self, placement: Sequence[Sequence[int]], what: str) -> None:
        """Refuse replicas whose files the process cannot keep open: every broker of the
        cluster lives in this one process, each replica keeps its segment files open (as
        a Kafka broker does), and a process out of descriptors accepts no connection."""
        free = free_descriptors()
        if free is None:
            return
        available, limit = free
        reserved = min(RESERVED_FILES, limit // 4)
        needed = FILES_PER_REPLICA * sum(len(replicas) for replicas in placement)
        if needed > available - reserved:
            raise ControllerError(
                ErrorCode.INVALID_PARTITIONS,
                f"{what}: its {sum(len(r) for r in placement)} replicas would keep {needed} "
                f"more files open, and the test cluster's process has {available} of its "
                f"{limit} descriptors (RLIMIT_NOFILE) left, {reserved} of them kept for "
                "connections: ask for fewer partitions or replicas, or raise ulimit -n")

    def create_partitions(self, name: str, total: int,
                          assignments: Optional[List[List[int]]] = None,
                          validate_only: bool = False) -> None:
        info = self.topics.get(name)
        if info is None:
            raise ControllerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}")
        have = len(info.partitions)
        if total <= have:
            raise ControllerError(ErrorCode.INVALID_PARTITIONS,
                                  f"topic {name!r} has {have} partitions; {total} is not more")
        rf = len(info.partitions[0].replicas)
        live = self.live_brokers()
        if assignments:
            placement = [list(a) for a in assignments]
            if len(placement) != total - have:
                raise ControllerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                      f"{len(placement)} assignments for {total - have} "
                                      "new partitions")
        else:
            if rf > len(live):
                raise ControllerError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                      f"replication factor {rf} is larger than the "
                                      f"{len(live)} available brokers")
            placement = place_replicas(live, total - have, rf, next(self._placement_start),
                                       first_partition=have)
        self._check_open_files(placement, f"{total - have} new partitions of {name!r}")
        if validate_only:
            return
        for i, replicas in enumerate(placement):
            isr = [r for r in replicas if r in live]
            info.partitions.append(PartitionInfo(name, have + i, replicas,
                                                 isr[0] if isr else -1, 0, isr))
        try:
            for broker in self.server.brokers.values():
                broker.on_topic_created(info)
        except OSError as exc:
            added = dataclasses.replace(info, partitions=info.partitions[have:])
            del info.partitions[have:]
            for broker in self.server.brokers.values():
                broker.on_topic_deleted(added)   # closes and removes the new replicas
            raise ControllerError(ErrorCode.KAFKA_STORAGE_ERROR,
                                  f"cannot open the logs of the new partitions of {name!r}: "
                                  f"{exc}") from None
        self.server.topics_changed()

    def delete_topic(self, name: str) -> None:
        info = self.topics.pop(name, None)
        if info is None:
            raise ControllerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}")
        self.topics_by_id.pop(info.topic_id, None)
        for broker in self.server.brokers.values():
            broker.on_topic_deleted(info)
        self.server.groups.topic_deleted(name)
        self.server.topics_changed()

    def alter_topic_config(self, name: str, overrides: Mapping[str, Any]) -> None:
        info = self.topics.get(name)
        if info is None:
            raise ControllerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}")
        try:
            values = resolve_topic_config(self.server.settings.values, overrides)
        except ConfigError as exc:
            raise ControllerError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        info.overrides = dict(overrides)
        info.values = values
        info.settings = TopicSettings.from_values(values)
        for broker in self.server.brokers.values():
            broker.on_topic_config_changed(info)

    # -- leadership ------------------------------------------------------------------
    def _publish(self, part: PartitionInfo) -> None:
        part.partition_epoch += 1
        for broker_id in part.replicas:
            broker = self.server.brokers.get(broker_id)
            if broker is not None and broker.up:
                broker.on_partition_changed(part)

    def elect(self, part: PartitionInfo, preferred: Optional[int] = None,
              exclude: Sequence[int] = ()) -> int:
        """Give the partition a new leader from its live ISR (``preferred`` if it
        qualifies), bump the leader epoch, and tell the replicas. Returns the leader, -1
        if none could be chosen (the partition is offline)."""
        live = set(self.live_brokers())
        candidates = [r for r in part.isr if r in live and r not in exclude]
        if preferred is not None:
            if preferred not in candidates:
                raise ControllerError(
                    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                    f"broker {preferred} is not a live in-sync replica of "
                    f"{part.topic}-{part.index} (ISR {part.isr})")
            leader = preferred
        elif candidates:
            # The next one after the current leader, so repeated moves rotate.
            ordered = [r for r in part.replicas if r in candidates]
            if part.leader in part.replicas:
                i = part.replicas.index(part.leader)
                rotated = part.replicas[i + 1:] + part.replicas[:i + 1]
                ordered = [r for r in rotated if r in candidates]
            leader = ordered[0]
        else:
            leader = -1
        changed = leader != part.leader
        part.leader = leader
        part.leader_epoch += 1
        self._publish(part)
        if changed:
            self.server.share_fetch.leader_changed(part.topic, part.index)
        return leader

    def move_leader(self, topic: str, index: int, to: Optional[int] = None) -> int:
        part = self.partition(topic, index)
        if part is None:
            raise ControllerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                  f"no partition {topic}-{index}")
        exclude = () if to is not None else (part.leader,)
        if to is None and len([r for r in part.isr if r in self.live_brokers()]) < 2:
            raise ControllerError(ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                                  f"{topic}-{index} has no other live in-sync replica "
                                  f"(ISR {part.isr})")
        return self.elect(part, preferred=to, exclude=exclude)

    def elect_leader(self, topic: str, index: int, unclean: bool) -> None:
        """ElectLeaders (KIP-460) for one partition, as Kafka's controller does it: the
        preferred (first) replica if it is a live in-sync replica and not the leader
        yet; unclean, a live replica (in sync or not) for a partition without a leader.
        Raises ControllerError (ELECTION_NOT_NEEDED when the partition is as asked)."""
        part = self.partition(topic, index)
        if part is None:
            raise ControllerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                  f"no partition {topic}-{index}")
        live = self.live_brokers()
        if unclean:
            if part.leader >= 0:
                raise ControllerError(ErrorCode.ELECTION_NOT_NEEDED,
                                      f"{topic}-{index} has a leader")
            chosen = next((r for r in part.replicas if r in live), None)
            if chosen is None:
                raise ControllerError(ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                                      f"no replica of {topic}-{index} is alive")
            part.isr = [chosen]
            self.elect(part, preferred=chosen)
            return
        preferred = part.replicas[0]
        if part.leader == preferred:
            raise ControllerError(ErrorCode.ELECTION_NOT_NEEDED,
                                  f"the preferred replica of {topic}-{index} leads")
        if preferred not in live or preferred not in part.isr:
            raise ControllerError(ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                                  f"the preferred replica {preferred} of {topic}-{index} "
                                  f"is not a live in-sync replica (ISR {part.isr})")
        self.elect(part, preferred=preferred)

    def change_isr(self, part: PartitionInfo, isr: List[int], leader_epoch: int) -> bool:
        """AlterPartition from the leader; refused if the leader epoch is stale."""
        if leader_epoch != part.leader_epoch:
            return False
        if sorted(isr) == sorted(part.isr):
            return True
        part.isr = [r for r in part.replicas if r in isr]
        self._publish(part)
        return True

    def broker_stopped(self, broker_id: int) -> None:
        """Fence a broker that went down: out of every ISR, its leaderships moved."""
        for part in self.all_partitions():
            if broker_id not in part.replicas:
                continue
            if part.leader == broker_id:
                if len(part.isr) > 1:
                    part.isr = [r for r in part.isr if r != broker_id]
                self.elect(part, exclude=(broker_id,))
            elif broker_id in part.isr:
                part.isr = [r for r in part.isr if r != broker_id]
                self._publish(part)

    def broker_started(self, broker_id: int) -> None:
        """A broker is back: offline partitions whose last ISR member it was get it as
        leader again; elsewhere it catches up as a follower and rejoins the ISR."""
        for part in self.all_partitions():
            if broker_id not in part.replicas:
                continue
            if part.leader == -1 and broker_id in part.isr:
                self.elect(part, preferred=broker_id)
            else:
                broker = self.server.brokers[broker_id]
                broker.on_partition_changed(part)
