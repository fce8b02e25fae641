"""The metadata cache, kept the way librdkafka keeps it.

* Brokers are cached additively: a broker learnt once stays known (its address updated
  when a later answer changes it), even when a later answer leaves it out.
* Topics are cached with the time of the answer; an entry older than
  ``metadata.max.age.ms`` is stale and is asked for again before use.
* Refreshes are coalesced: while a Metadata request is in flight, further requests only
  add their topics to the next one, which goes out when the answer comes back.
* Errors that mean "the cache is wrong" (NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE,
  UNKNOWN_TOPIC_OR_PARTITION, a leader change seen in a Produce answer, a lost
  connection) mark the topic for a fast refresh, retried with a doubling interval from
  ``topic.metadata.refresh.fast.interval.ms`` while leaders are missing.
* Only what is in use is kept: at each periodic refresh the owner says which wanted
  topics it still uses (:attr:`MetadataCache.in_use`, the consumer's) and the others are
  forgotten; a producer forgets its idle topics itself (``metadata.max.idle.ms``);
  cached topics nobody wants expire at ``metadata.max.age.ms``, and an answer for every
  topic drops the deleted ones. The cache and the requests follow current use, not the
  client's history.

The public classes at the bottom (:class:`ClusterMetadata`, :class:`TopicMetadata`, ...)
are what ``list_topics()`` returns, shaped like confluent-kafka's.
"""
from __future__ import annotations

import logging
import time
import uuid
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple

from kafka_client.errors import KafkaError, broker_code
from kafka_proto.errors import ErrorCode

__all__ = [
    "coordinator_answer",
    "MetadataCache",
    "TopicInfo",
    "ClusterMetadata",
    "BrokerMetadata",
    "TopicMetadata",
    "PartitionMetadata",
]

_log = logging.getLogger("kafka_client.metadata")

#: Partition ids at or above this are refused as malformed (far beyond any real topic).
MAX_PARTITIONS = 1 << 17
#: Broker errors that mean the cached leaders are wrong: the topic is refreshed soon.
REFRESH_ERRORS = frozenset((ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE,
                            ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH,
                            ErrorCode.UNKNOWN_LEADER_EPOCH))
#: Re-exported for producer/sender.py, which imports it from here (until it names
#: ErrorCode itself).
UNKNOWN_TOPIC_OR_PARTITION = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def coordinator_answer(resp: Any, key: str) -> Tuple[int, Optional[str], int, str, int]:
    """``(error code, error message, node id, host, port)`` of a FindCoordinator answer
    for ``key``: the top-level fields before v4, the entry for ``key`` from v4 on. An
    answer that names no usable broker without saying why (no entry for ``key``, a
    negative node id, which would mix with the bootstrap connections' ids, no host, a
    port out of range) is COORDINATOR_NOT_AVAILABLE, looked up again after the backoff:
    taken as it was, it became a broker of node 0 at host "" (connection attempts
    failing with _RESOLVE for as long as the group or call lasted)."""
    entries = getattr(resp, "coordinators", None)
    if entries:
        entry = next((c for c in entries if c.key == key), None)
        if entry is None:
            return (ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    f"FindCoordinator answer has no entry for {key!r}", -1, "", -1)
    else:
        entry = resp   # before v4 (an empty list at v4+ leaves these fields blank)
    code, node, host, port = entry.error_code, entry.node_id, entry.host, entry.port
    message = getattr(entry, "error_message", None)
    if not code and (node < 0 or not host or not 0 < port < 65536):
        return (ErrorCode.COORDINATOR_NOT_AVAILABLE,
                f"FindCoordinator answer names no usable broker for {key!r} (node {node} "
                f"at {host!r}:{port})", -1, "", -1)
    return code, message, node, host, port


class TopicInfo:
    """What the cache knows about one topic."""

    __slots__ = ("name", "error", "leaders", "epochs", "updated", "partition_errors",
                 "topic_id")

    def __init__(self, name: str, error: int, leaders: List[int], epochs: List[int],
                 partition_errors: List[int], updated: float,
                 topic_id: Optional[uuid.UUID] = None) -> None:
        self.name = name
        #: the topic's id (Metadata v10+), None when the broker gave none or all zeros
        self.topic_id = topic_id
        self.error = error              # topic-level broker error code (0 = fine)
        self.leaders = leaders          # leader node id per partition (-1 = none)
        self.epochs = epochs            # leader epoch per partition (-1 = unknown)
        self.partition_errors = partition_errors
        self.updated = updated

    @property
    def partition_count(self) -> int:
        return len(self.leaders)

    def available(self) -> List[int]:
        """Partitions with a leader."""
        return [i for i, leader in enumerate(self.leaders) if leader >= 0]

    def __repr__(self) -> str:
        return f"TopicInfo({self.name!r}, error={self.error}, leaders={self.leaders})"


class MetadataCache:
    """Brokers and topics; decides when a refresh is due (no I/O here).

    ``max_age`` and the refresh intervals are in seconds. The owner (the cluster) asks
    :meth:`due` on every loop turn and sends the Metadata request for
    :meth:`take_request_topics`; :meth:`update` digests the answer.
    """

    def __init__(self, max_age: float = 900.0, refresh_interval: float = 300.0,
                 fast_interval: float = 0.1, fast_max: float = 1.0,
                 log: Optional[Any] = None,
                 hidden: Optional[Callable[[str], bool]] = None) -> None:
        self.log = log if log is not None else _log
        #: topic.blacklist: topics left out of every answer, as if they did not exist
        self.hidden = hidden
        self.max_age = max_age
        self.refresh_interval = refresh_interval  # <= 0: no periodic refresh
        self.fast_interval = fast_interval
        self.fast_max = fast_max
        #: node id -> (host, port, rack)
        self.brokers: Dict[int, Tuple[str, int, Optional[str]]] = {}
        #: node id -> when a Metadata answer last listed it (monotonic)
        self.listed_at: Dict[int, float] = {}
        #: the brokers the last Metadata answer listed (``brokers`` keeps every broker
        #: ever named: a stopped or removed one stays there)
        self.listed_brokers: List[int] = []
        self.topics: Dict[str, TopicInfo] = {}
        self.cluster_id: Optional[str] = None
        self.controller_id = -1
        self.wanted: Set[str] = set()      # topics the client uses (kept fresh)
        self._asked: Set[str] = set()      # topics for the next request
        self._all_asked = False            # next request asks for every topic
        self.in_flight = False
        self._next_periodic = time.monotonic() + (refresh_interval if refresh_interval > 0
                                                  else float("inf"))
        self._fast_at: Optional[float] = None
        self._fast_delay = fast_interval
        self._last_sent = float("-inf")
        #: no wanted topic is older than max_age before this time (see _age_check)
        self._age_check_at = float("inf")
        self.version = 0                   # bumped on every update (listeners compare it)
        self.updates = 0
        #: the owner's topics in use now, among the ones given (a consumer's: subscribed,
        #: assigned, looked up); asked at each periodic refresh, the other wanted topics
        #: are forgotten (None: every wanted topic stays wanted)
        self.in_use: Optional[Callable[[Set[str]], Set[str]]] = None

    # -- asking ------------------------------------------------------------------------
    def want(self, topics: Iterable[str]) -> None:
        """Topics the client uses: asked for now if unknown, then kept fresh."""
        for t in topics:
            if t not in self.wanted:
                self.wanted.add(t)
                info = self.topics.get(t)
                if info is None:
                    self._asked.add(t)
                else:
                    self._age_check_at = min(self._age_check_at, info.updated + self.max_age)

    def forget(self, topics: Iterable[str]) -> None:
        """Topics the client no longer uses (a producer's idle topics,
        ``metadata.max.idle.ms``): no longer asked for, and out of the cache."""
        for t in topics:
            self.wanted.discard(t)
            self._asked.discard(t)
            self.topics.pop(t, None)

    def _forget_unused(self) -> None:
        """The wanted topics the owner no longer uses (see :attr:`in_use`) are
        forgotten: they were refreshed, each one named in every Metadata request, for the
        client's life (a consumer's subscriptions and assignments of long ago)."""
        if self.in_use is None or not self.wanted:
            return
        try:
            unused = self.wanted - self.in_use(set(self.wanted))
        except Exception:  # the owner's bug must not stop the refresh
            self.log.exception("metadata: which topics are in use failed")
            return
        if unused:
            self.log.debug("metadata: %d topics no longer used are forgotten", len(unused))
            self.forget(unused)

    def _age_check(self, now: float) -> None:
        """Ask again for the wanted topics older than max_age, and note when the next
        one will be. (Looked at on every loop turn, the scan of every wanted topic cost
        the I/O thread time in proportion to them: a producer writing to thousands of
        topics spent most of its loop there.)"""
        earliest = float("inf")
        topics = self.topics
        for name in self.wanted:
            info = topics.get(name)
            if info is None:
                continue
            stale_at = info.updated + self.max_age
            if now >= stale_at:
                self._asked.add(name)
            elif stale_at < earliest:
                earliest = stale_at
        self._age_check_at = earliest

    def _evict_aged(self, now: float) -> None:
        """Cached topics nobody wants (from ``list_topics(topic)`` answers, say) leave
        the cache once older than ``metadata.max.age.ms``, as librdkafka's cache entries
        expire: each such answer added one for the client's life."""
        wanted = self.wanted
        for name in [n for n, info in self.topics.items()
                     if n not in wanted and now - info.updated >= self.max_age]:
            del self.topics[name]

    def request(self, topics: Optional[Iterable[str]] = None, *, fast: bool = False,
                now: Optional[float] = None) -> Optional[float]:
        """Ask for a refresh of ``topics`` (None: every topic) at the next chance;
        ``fast``: an error said the cache is wrong (at most one such request per
        fast interval). Returns when a fast request goes out (None: not fast, or one is
        in flight, whose answer wakes the loop): a caller asking from its tick, after
        the cluster's tick of that loop turn, must have the loop turn again by then."""
        if topics is None:
            self._all_asked = True
        else:
            self._asked.update(topics)
        if not fast:
            return None
        now = time.monotonic() if now is None else now
        if self._fast_at is None:
            self._fast_at = max(now, self._last_sent + self.fast_interval)
            return None if self.in_flight else self._fast_at
        # Asked before: a due request is the cluster's tick's to send, and its tick says
        # when it looks again (no ready connection yet, say). Returned, a time already
        # past had the loop turn without waiting, a CPU spinning while a broker took the
        # connection and never answered.
        return None if self.in_flight or self._fast_at <= now else self._fast_at

    def due(self, now: float) -> Optional[float]:
        """0 if a request should go out now, else the time it will be due (or None)."""
        if self.in_flight:
            return None
        if now >= self._next_periodic:
            # The clock moves on whether or not there is anything to refresh: left in
            # the past, it made every later loop turn send a Metadata request (a client
            # that wanted no topic asked thousands of times a second once it was due).
            self._forget_unused()
            self._evict_aged(now)
            self._asked.update(self.wanted)
            self._next_periodic = now + self.refresh_interval
        if now >= self._age_check_at:
            self._age_check(now)
        if self._fast_at is not None:
            if now < self._fast_at:
                return self._fast_at
            return 0.0
        if self._asked or self._all_asked:
            return 0.0
        return self._next_periodic if self.refresh_interval > 0 else None

    def take_request_topics(self, now: Optional[float] = None) -> Optional[List[str]]:
        """The topics of the request about to go out (None = all); marks it in flight."""
        self.in_flight = True
        self._last_sent = time.monotonic() if now is None else now
        if self._fast_at is not None:
            # What made the fast refresh: the wanted topics with trouble, asked again.
            self._asked.update(self.wanted)
        if self._all_asked:
            self._all_asked = False
            self._asked.clear()
            self._fast_at = None
            return None
        topics = sorted(self._asked)
        self._asked.clear()
        self._fast_at = None
        return topics

    def failed(self, topics: Optional[List[str]], now: float) -> None:
        """The request for ``topics`` got no answer: ask again after the fast interval."""
        self.in_flight = False
        if topics is None:
            self._all_asked = True
        else:
            self._asked.update(topics)
        self._schedule_fast(now)

    def _schedule_fast(self, now: float) -> None:
        self._fast_at = now + self._fast_delay
        self._fast_delay = min(self._fast_delay * 2, self.fast_max)

    # -- answers ---------------------------------------------------------------------
    def broker_named(self, node_id: int, host: str, port: int, now: float) -> None:
        """An answer other than Metadata's (FindCoordinator) names a broker: its address,
        and that it was up at ``now``."""
        known = self.brokers.get(node_id)
        if known is None or (known[0], known[1]) != (host, port):
            self.brokers[node_id] = (host, port, known[2] if known else None)
        self.listed_at[node_id] = now

    def update(self, resp, now: float, asked: Optional[List[str]]) -> Set[str]:
        """Digest a MetadataResponse; returns the topics whose leaders or partition count
        changed (including topics new to the cache)."""
        self.in_flight = False
        for b in resp.brokers or ():
            self.brokers[b.node_id] = (b.host, b.port, getattr(b, "rack", None))
            self.listed_at[b.node_id] = now
        if resp.brokers:
            self.listed_brokers = sorted(b.node_id for b in resp.brokers)
        if getattr(resp, "cluster_id", None) is not None:
            self.cluster_id = resp.cluster_id
        if getattr(resp, "controller_id", -1) >= 0:
            self.controller_id = resp.controller_id
        changed: Set[str] = set()
        trouble = False
        hidden = self.hidden
        for t in resp.topics or ():
            name = t.name
            if name is None or (hidden is not None and hidden(name)):
                continue
            # A partition id outside 0..MAX_PARTITIONS-1 is not one a broker gives: left
            # out (negative ids would land at the list's end, huge ones allocate gigabytes).
            parts = sorted((p for p in t.partitions or ()
                            if 0 <= p.partition_index < MAX_PARTITIONS),
                           key=lambda p: p.partition_index)
            if len(parts) != len(t.partitions or ()):
                self.log.warning("Metadata for %r has partition ids outside 0..%d: ignored",
                                 name, MAX_PARTITIONS - 1)
            # A topic's partitions are 0..n-1: ids past a gap (0, 1, 2, 1000) would make
            # the topic that long, its keys spread over partitions that do not exist.
            contiguous = 0
            for p in parts:
                if p.partition_index == contiguous:
                    contiguous += 1
                elif p.partition_index > contiguous:
                    self.log.warning("Metadata for %r lists partition %d but not %d: the "
                                     "ids past the gap ignored", name, p.partition_index,
                                     contiguous)
                    parts = [q for q in parts if q.partition_index < contiguous]
                    break
            count = (parts[-1].partition_index + 1) if parts else 0
            leaders = [-1] * count
            epochs = [-1] * count
            perrs = [0] * count
            for p in parts:
                leaders[p.partition_index] = p.leader_id
                epochs[p.partition_index] = getattr(p, "leader_epoch", -1)
                perrs[p.partition_index] = broker_code(p.error_code)
            old = self.topics.get(name)
            tid = getattr(t, "topic_id", None)
            tid = tid if tid is not None and tid.int else None
            if old is not None and not old.error and not broker_code(t.error_code) and \
                    count < len(old.leaders) and tid == old.topic_id:
                # A topic never loses partitions: fewer of them, for the same topic (the
                # same id, or no ids), come from a broker whose metadata lags (after
                # CreatePartitions): the ones it leaves out are kept, and asked again soon.
                # (Taken, one such answer shrank the producer's topic until a leader
                # moved: keys mapped over fewer partitions, explicit ones refused.)
                leaders += old.leaders[count:]
                epochs += old.epochs[count:]
                perrs += old.partition_errors[count:]
                count = len(leaders)
                trouble = trouble or name in self.wanted
            if old is not None and tid is not None and old.topic_id == tid:
                # A broker whose metadata lags names an older leader than one known
                # (from another broker, or a NOT_LEADER answer, KIP-951): keep the newer,
                # as the Java client does. (A topic deleted and made again has another
                # id, and its epochs start over.)
                for i in range(min(count, len(old.leaders))):
                    if 0 <= epochs[i] < old.epochs[i]:
                        leaders[i], epochs[i] = old.leaders[i], old.epochs[i]
                        trouble = trouble or name in self.wanted
            code = broker_code(t.error_code)
            info = TopicInfo(name, code, leaders, epochs, perrs, now, tid)
            if name in self.wanted and now + self.max_age < self._age_check_at:
                self._age_check_at = now + self.max_age
            if code and code != ErrorCode.LEADER_NOT_AVAILABLE and count == 0:
                info.leaders = []
            if old is None or old.leaders != info.leaders or old.error != info.error:
                changed.add(name)
            self.topics[name] = info
            # A leader that is no broker named (99, a negative id) is as missing as -1:
            # the refresh backs off the same way (it was asked ten times a second). A
            # topic the ACLs refuse is asked again the same way, as librdkafka does, so
            # an ACL granted is seen within a second (it was seen after
            # topic.metadata.refresh.interval.ms: 5 minutes of produce() refused).
            if name in self.wanted and (code in REFRESH_ERRORS or (not code and count == 0)
                                        or code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
                                        or any(leader < 0 or leader not in self.brokers
                                               for leader in leaders)):
                trouble = True
        if asked is None:
            # An answer for every topic: the cached topics it leaves out were deleted.
            # Kept, they stayed for the client's life (and a consumer's patterns still
            # matched them); the wanted ones are asked for by name, and stay.
            listed = {t.name for t in resp.topics or ()}
            for name in [n for n in self.topics if n not in listed and n not in self.wanted]:
                del self.topics[name]
        if trouble:
            self._schedule_fast(now)
        else:
            self._fast_delay = self.fast_interval
        self.version += 1
        self.updates += 1
        return changed

    def topic(self, name: str) -> Optional[TopicInfo]:
        return self.topics.get(name)

    def known_leaders(self, name: str) -> Optional[List[int]]:
        """Any thread: the leader of each partition of ``name`` when the cache knows its
        partitions (a ``list_topics()`` answer, say), else None. Needs no lock: an update
        replaces an entry and its lists, it never changes them in place."""
        info = self.topics.get(name)
        if info is None or not info.leaders or \
                info.error not in (ErrorCode.NONE, ErrorCode.LEADER_NOT_AVAILABLE):
            return None
        return list(info.leaders)

    def leader(self, topic: str, partition: int) -> int:
        info = self.topics.get(topic)
        if info is None or partition >= len(info.leaders):
            return -1
        return info.leaders[partition]

    def learn_leader(self, topic: str, partition: int, leader: int, epoch: int) -> bool:
        """A broker's answer named the partition's current leader (KIP-951: Fetch v12+
        and Produce v10+ carry it with NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH).
        Taken when its epoch is newer than the cache's and the broker is known; True
        if so. The next metadata answer still replaces it, as every entry."""
        info = self.topics.get(topic)
        if info is None or not 0 <= partition < len(info.leaders) or leader < 0 \
                or epoch <= info.epochs[partition] or leader not in self.brokers:
            return False
        leaders, epochs = list(info.leaders), list(info.epochs)
        leaders[partition], epochs[partition] = leader, epoch
        info.leaders, info.epochs = leaders, epochs
        self.version += 1
        return True

    def leader_epoch(self, topic: str, partition: int) -> int:
        """The partition's leader epoch as the metadata last said (-1: not known)."""
        info = self.topics.get(topic)
        if info is None or partition >= len(info.epochs):
            return -1
        return info.epochs[partition]

    def mark_stale(self, topic: str, now: Optional[float] = None) -> None:
        """An error said this topic's entry is wrong: refresh it soon."""
        self.request([topic], fast=True, now=now)


# --------------------------------------------------------------------------- public view


class BrokerMetadata:
    """A broker as ``list_topics()`` reports it (confluent-kafka's shape). The arguments
    default to confluent-kafka's empty broker (-1, None, -1): programs build these for
    mocked ``list_topics()`` answers without arguments, then set the attributes."""

    def __init__(self, id: int = -1, host: Optional[str] = None, port: int = -1) -> None:
        self.id = id
        self.host = host
        self.port = port

    def __repr__(self) -> str:
        return f"BrokerMetadata({self.id}, {self.host}:{self.port})"

    def __str__(self) -> str:
        return f"{self.host}:{self.port}/{self.id}"


class PartitionMetadata:
    """One partition: ``id``, ``leader``, ``replicas``, ``isrs``, ``error``; without
    arguments confluent-kafka's empty one (-1, -1, [], [], None)."""

    def __init__(self, id: int = -1, leader: int = -1, replicas: Optional[List[int]] = None,
                 isrs: Optional[List[int]] = None, error: Optional[KafkaError] = None) -> None:
        self.id = id
        self.leader = leader
        self.replicas = [] if replicas is None else replicas
        self.isrs = [] if isrs is None else isrs
        self.error = error

    # repr and str as confluent-kafka's: programs print partitions as their id.
    def __repr__(self) -> str:
        if self.error is not None:
            return f"PartitionMetadata({self.id}, {self.error})"
        return f"PartitionMetadata({self.id})"

    def __str__(self) -> str:
        return str(self.id)


class TopicMetadata:
    """One topic: ``topic``, ``partitions`` ({id: PartitionMetadata}), ``error``; without
    arguments confluent-kafka's empty one (None, {}, None)."""

    def __init__(self, topic: Optional[str] = None,
                 partitions: Optional[Dict[int, PartitionMetadata]] = None,
                 error: Optional[KafkaError] = None) -> None:
        self.topic = topic
        self.partitions = {} if partitions is None else partitions
        self.error = error

    def __repr__(self) -> str:
        if self.error is not None:
            return f"TopicMetadata({self.topic}, {len(self.partitions)} partitions, " \
                   f"{self.error})"
        return f"TopicMetadata({self.topic}, {len(self.partitions)} partitions)"

    def __str__(self) -> str:
        return str(self.topic)


class ClusterMetadata:
    """The answer of ``list_topics()``: ``cluster_id``, ``controller_id``, ``brokers``
    ({id: BrokerMetadata}), ``topics`` ({name: TopicMetadata}), ``orig_broker_id``,
    ``orig_broker_name``."""

    def __init__(self) -> None:
        self.cluster_id: Optional[str] = None
        self.controller_id = -1
        self.brokers: Dict[int, BrokerMetadata] = {}
        self.topics: Dict[str, TopicMetadata] = {}
        self.orig_broker_id = -1
        self.orig_broker_name: Optional[str] = None

    def __repr__(self) -> str:
        return f"ClusterMetadata({self.cluster_id})"

    def __str__(self) -> str:
        return str(self.cluster_id)

    @classmethod
    def from_response(cls, resp, node_id: int, name: str) -> "ClusterMetadata":
        md = cls()
        md.cluster_id = getattr(resp, "cluster_id", None)
        md.controller_id = getattr(resp, "controller_id", -1)
        md.orig_broker_id = node_id
        md.orig_broker_name = name
        for b in resp.brokers or ():
            md.brokers[b.node_id] = BrokerMetadata(b.node_id, b.host, b.port)
        for t in resp.topics or ():
            parts = {}
            for p in t.partitions or ():
                parts[p.partition_index] = PartitionMetadata(
                    p.partition_index, p.leader_id, list(p.replica_nodes or ()),
                    list(p.isr_nodes or ()),
                    KafkaError(broker_code(p.error_code)) if p.error_code else None)
            md.topics[t.name] = TopicMetadata(
                t.name, parts, KafkaError(broker_code(t.error_code)) if t.error_code else None)
        return md
