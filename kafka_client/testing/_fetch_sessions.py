"""KIP-227 incremental fetch sessions, kept per broker as a Kafka broker keeps them.

A Fetch names its session with ``(session_id, session_epoch)``:

* epoch -1 (final) or 0 (initial) is a *full* fetch: the session it names, if any, is
  dropped first; epoch -1 stays sessionless, epoch 0 asks for a new session, which the
  broker creates (when its cache has room) once it answers, remembering every partition
  of the request with what the answer said of it;
* any other epoch is *incremental*: the session must exist and expect that epoch. The
  request's partitions are added to the session or update its cached fetch parameters,
  its forgotten partitions leave it, and the broker reads every partition of the session,
  answering only those with something new (see :meth:`SessionPartition.must_answer`).

The cache holds ``max.incremental.fetch.session.cache.slots`` sessions. When it is full a
new session takes the place of (1) the least recently used session if that one has been
idle for longer than the eviction time, else (2) the session with the fewest partitions
among those older than the eviction time (a follower's sessions only for another
follower's), if the new one has more partitions or is a follower's and that one is not;
otherwise no session is created and the fetch is answered as a full sessionless one.
"""
from __future__ import annotations

import random
import time
from typing import Any, Callable, Dict, Hashable, List, Optional, Tuple

from kafka_proto.enums import FetchSessionEpoch

__all__ = ["NO_SESSION", "FetchSession", "FetchSessionCache",
           "PartitionKey", "SessionPartition", "next_epoch"]

#: The session id of a fetch outside any session.
NO_SESSION = 0
_INT32_MAX = (1 << 31) - 1

#: A partition's key in a session: (topic id or topic name, partition).
PartitionKey = Tuple[Hashable, int]


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch``: one more, wrapping from 2**31-1 to 1 (0 is the
    initial epoch, never used again in a session)."""
    if epoch < 0:
        return FetchSessionEpoch.FINAL
    return 1 if epoch == _INT32_MAX else epoch + 1


class SessionPartition:
    """One partition of a session: the fetch parameters last sent for it, and what the
    session last told the client of it.

    The attributes carry the names of ``FetchRequest.FetchPartition``'s fields, so the
    read path takes either.
    """

    __slots__ = ("topic", "topic_id", "partition", "fetch_offset", "partition_max_bytes",
                 "log_start_offset", "current_leader_epoch", "last_fetched_epoch",
                 "sent_high_watermark", "sent_log_start_offset")

    def __init__(self, topic: str, topic_id: Any, request_partition: Any) -> None:
        #: The topic name of a session without topic ids ("" in one with them).
        self.topic = topic
        #: The topic id of a session with topic ids (the zero UUID otherwise).
        self.topic_id = topic_id
        self.partition = request_partition.partition
        self.update(request_partition)
        # None: never answered for, so the first answer always includes it.
        self.sent_high_watermark: Optional[int] = None
        self.sent_log_start_offset: Optional[int] = None

    def update(self, p: Any) -> None:
        """Take the fetch parameters of a request's partition."""
        self.fetch_offset = p.fetch_offset
        self.partition_max_bytes = p.partition_max_bytes
        self.log_start_offset = p.log_start_offset
        self.current_leader_epoch = p.current_leader_epoch
        self.last_fetched_epoch = p.last_fetched_epoch

    def remember(self, data: Any) -> None:
        """Record what an answer told the client (an error forgets the high watermark,
        so the partition is answered again once the error is gone)."""
        self.sent_high_watermark = -1 if data.error_code else data.high_watermark
        self.sent_log_start_offset = data.log_start_offset

    def must_answer(self, data: Any, record_bytes: int) -> bool:
        """Whether an incremental answer includes this partition's ``data``: records, an
        error, a diverging epoch, a preferred read replica, or a high watermark or log
        start offset other than the session last gave. Kafka compares no last stable
        offset: it moves with records or the high watermark a read_committed client sees."""
        return bool(record_bytes or data.error_code
                    or data.preferred_read_replica >= 0
                    or data.diverging_epoch.epoch >= 0 or data.diverging_epoch.end_offset >= 0
                    or data.high_watermark != self.sent_high_watermark
                    or data.log_start_offset != self.sent_log_start_offset)


class FetchSession:
    """An incremental fetch session: its partitions in the order they are read (one
    answered moves to the end, so that ``max_bytes`` does not always favour the same
    ones) and the epoch its next request must carry."""

    def __init__(self, session_id: int, uses_topic_ids: bool, privileged: bool,
                 partitions: Dict[PartitionKey, SessionPartition], now: float) -> None:
        self.id = session_id
        #: The epoch the next incremental request must carry.
        self.epoch = next_epoch(FetchSessionEpoch.INITIAL)
        #: Made by a Fetch v13+ (topics by id): every request of the session must be.
        self.uses_topic_ids = uses_topic_ids
        #: Made by a follower (a replica id): evicted after consumers' sessions.
        self.privileged = privileged
        self.partitions = partitions
        self.created = now
        self.last_used = now

    def update(self, requested: List[Tuple[PartitionKey, str, Any, Any]],
               forgotten: List[PartitionKey]) -> None:
        """Apply an incremental request: ``requested`` as (key, topic name, topic id,
        request partition) are added or updated, then ``forgotten`` ones removed."""
        for key, topic, topic_id, p in requested:
            cached = self.partitions.get(key)
            if cached is None:
                self.partitions[key] = SessionPartition(topic, topic_id, p)
            else:
                cached.update(p)
        for key in forgotten:
            self.partitions.pop(key, None)

    def move_to_end(self, key: PartitionKey) -> None:
        self.partitions[key] = self.partitions.pop(key)


class FetchSessionCache:
    """One broker's fetch sessions (see the module's docstring for the eviction rule)."""

    def __init__(self, slots: int, eviction_ms: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.slots = slots
        self.eviction_s = eviction_ms / 1000
        self.clock = clock
        self.sessions: Dict[int, FetchSession] = {}
        self.evictions = 0
        self._random = random.Random()

    def get(self, session_id: int) -> Optional[FetchSession]:
        return self.sessions.get(session_id)

    def remove(self, session_id: int) -> bool:
        return self.sessions.pop(session_id, None) is not None

    def clear(self) -> int:
        """Drop every session; returns how many there were."""
        count = len(self.sessions)
        self.sessions.clear()
        return count

    def touch(self, session: FetchSession) -> None:
        session.last_used = self.clock()

    def create(self, partitions: Dict[PartitionKey, SessionPartition], uses_topic_ids: bool,
               privileged: bool) -> Optional[FetchSession]:
        """A new session holding ``partitions``, or None when the cache has no room."""
        now = self.clock()
        if len(self.sessions) >= self.slots and not self._evict_for(len(partitions),
                                                                    privileged, now):
            return None
        session = FetchSession(self._new_id(), uses_topic_ids, privileged, partitions, now)
        self.sessions[session.id] = session
        return session

    def _new_id(self) -> int:
        while True:
            session_id = self._random.randint(1, _INT32_MAX)
            if session_id not in self.sessions:
                return session_id

    def _evict_for(self, size: int, privileged: bool, now: float) -> bool:
        if not self.sessions:
            return False
        idlest = min(self.sessions.values(), key=lambda s: (s.last_used, s.id))
        if now - idlest.last_used > self.eviction_s:
            return self._evict(idlest)
        # Young sessions are kept; a follower may also take a consumer's place.
        candidates = [s for s in self.sessions.values()
                      if now - s.created > self.eviction_s or (privileged and not s.privileged)]
        if not candidates:
            return False
        weakest = min(candidates, key=lambda s: (s.privileged, len(s.partitions), s.id))
        if (privileged, size) > (weakest.privileged, len(weakest.partitions)):
            return self._evict(weakest)
        return False

    def _evict(self, session: FetchSession) -> bool:
        del self.sessions[session.id]
        self.evictions += 1
        return True

    def describe(self, topic_name: Callable[[SessionPartition], Optional[str]]
                 ) -> List[Dict[str, Any]]:
        """Every session, oldest first: id, next expected epoch, whether it names topics
        by id, and its partitions as [topic, partition, fetch offset] in read order."""
        return [{"id": s.id, "epoch": s.epoch, "topic_ids": s.uses_topic_ids,
                 "partitions": [[topic_name(p), p.partition, p.fetch_offset]
                                for p in s.partitions.values()]}
                for s in sorted(self.sessions.values(), key=lambda s: s.created)]
