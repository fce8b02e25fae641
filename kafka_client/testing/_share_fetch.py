"""Share-partition state, share sessions, ShareFetch and ShareAcknowledge (KIP-932).

Each (share group, partition) has a share-partition: the start offset (SPSO: every
record below it is done with), the end of the records fetched so far, and between them
the in-flight records, each ``available``, ``acquired`` (by one member until its lock's
deadline), ``acknowledged`` or ``archived``, with its delivery count. The start offset
is set at the first ShareFetch of the group from the group config
``share.auto.offset.reset`` (``latest`` by default, as Kafka: the high watermark then).

A ShareFetch acquires available records for the member (those released before first,
then new ones below the high watermark), at most MaxRecords, locks them for
``share.record.lock.duration.ms`` and returns the whole batches holding them with the
acquired ranges and their delivery counts. Acknowledgements (ACCEPT, RELEASE, REJECT;
GAP for an offset that is no record) come piggy-backed on a ShareFetch or in a
ShareAcknowledge; a record acknowledged by another member than its holder, or not
acquired, is INVALID_RECORD_STATE. A released record, or one whose lock expires or
whose member closes its share session or leaves the group, is available again, unless
it was delivered ``share.delivery.count.limit`` times: then it is archived.

Kafka keeps share-partition state with a share coordinator (the __share_group_state
topic); here it lives in the cluster process, so a leader move keeps it and a cluster
restart loses it; the acquisitions are the leader's memory only, so a new leader has the
records acquired under the old one available again. The share sessions (per broker,
keyed by group and member) live in the broker's memory as in Kafka: epoch 0 opens one,
-1 or the close of the connection that opened it closes it (releasing the member's
records of its partitions), every other request brings the next epoch.
"""
from __future__ import annotations

import itertools
import os
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Set, Tuple

from kafka_proto.enums import AcknowledgeType, AclOperation, AclResourceType, FetchSessionEpoch
from kafka_proto.errors import ErrorCode
from kafka_proto.messages import ApiKey, ShareAcknowledgeResponse, ShareFetchResponse
from kafka_proto.records import iter_batch_headers

from ._api import RequestContext, error_answer, handles
from ._long_poll import LongPoll

if TYPE_CHECKING:  # pragma: no cover
    from ._broker import Broker
    from ._server import ClusterServer

__all__ = ["ShareFetchState", "SharePartition", "ShareSession", "InFlightRecord"]

# In-flight record states.
AVAILABLE = "available"
ACQUIRED = "acquired"
ACKNOWLEDGED = "acknowledged"
ARCHIVED = "archived"

#: A partition answered without records carries empty ones, never null, as Kafka's
#: (MemoryRecords.EMPTY): librdkafka refuses the whole answer for a null (MessageSetSize -1).
NO_RECORDS = b""

#: ShareFetch v0 has no MaxRecords: Kafka's consumer asked for max.poll.records (500).
DEFAULT_MAX_RECORDS = 500

#: (group id, topic id, partition)
SharePartitionKey = Tuple[str, uuid.UUID, int]


@dataclass
class InFlightRecord:
    state: str = AVAILABLE
    delivery_count: int = 0
    owner: Optional[str] = None
    #: The acquisition that holds it (its lock timer names it).
    acquisition: int = 0


@dataclass(frozen=True)
class Acquired:
    """A run of acquired offsets with one delivery count (ShareFetch's AcquiredRecords)."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True)
class AcquireResult:
    records: bytes
    acquired: List[Acquired]


@dataclass(eq=False)
class SharePartition:
    group_id: str
    topic: str
    topic_id: uuid.UUID
    partition: int
    #: SPSO; None until the first ShareFetch reads the partition.
    start_offset: Optional[int] = None
    #: The offset after the last one fetched: beyond it every record is available.
    end_offset: int = 0
    records: Dict[int, InFlightRecord] = field(default_factory=dict)

    def state_of(self, offset: int) -> str:
        """The state of any offset (below the start offset: done with, archived)."""
        if self.start_offset is None or offset >= self.end_offset:
            return AVAILABLE
        if offset < self.start_offset:
            return ARCHIVED
        return self.records[offset].state

    def advance_start(self) -> None:
        """Move the start offset past the records done with."""
        start = self.start_offset
        if start is None:        # never read: nothing done with yet
            return
        while start < self.end_offset and \
                self.records[start].state in (ACKNOWLEDGED, ARCHIVED):
            del self.records[start]
            start += 1
        self.start_offset = start

    def release(self, record: InFlightRecord, limit: int) -> None:
        record.owner = None
        record.acquisition = 0
        record.state = ARCHIVED if record.delivery_count >= limit else AVAILABLE


@dataclass(eq=False)
class ShareSession:
    group_id: str
    member_id: str
    #: The epoch the next request must bring.
    next_epoch: int = 1
    partitions: Dict[Tuple[uuid.UUID, int], None] = field(default_factory=dict)


class ShareFetchState:
    """Every share-partition of the cluster and every broker's share sessions."""

    def __init__(self, server: "ClusterServer") -> None:
        self.server = server
        self.partitions: Dict[SharePartitionKey, SharePartition] = {}
        #: (broker id, group id, member id) -> session
        self.sessions: Dict[Tuple[int, str, str], ShareSession] = {}
        self._acquisitions = itertools.count(1)

    def _config(self, group_id: str, name: str) -> Any:
        return self.server.share_groups.config(group_id, name)

    def partition(self, group_id: str, topic: str, topic_id: uuid.UUID,
                  index: int) -> SharePartition:
        key = (group_id, topic_id, index)
        sp = self.partitions.get(key)
        if sp is None:
            sp = self.partitions[key] = SharePartition(group_id, topic, topic_id, index)
        return sp

    def describe(self, group_id: str) -> List[Dict[str, Any]]:
        """Each share-partition of the group: start and end offsets, and the in-flight
        records, ``[offset, state, delivery count, owner]`` (``Cluster.share_state``)."""
        out = []
        for (gid, _, _), sp in sorted(self.partitions.items(),
                                      key=lambda kv: (kv[1].topic, kv[1].partition)):
            if gid != group_id:
                continue
            out.append({"topic": sp.topic, "partition": sp.partition,
                        "start_offset": sp.start_offset, "end_offset": sp.end_offset,
                        "records": [[o, r.state, r.delivery_count, r.owner]
                                    for o, r in sorted(sp.records.items())]})
        return out

    # -- acquiring -------------------------------------------------------------------
    def acquire(self, sp: SharePartition, member_id: str, log: Any, max_records: int,
                max_bytes: int) -> Optional[AcquireResult]:
        """Acquire available records of ``sp`` for the member from the leader's ``log``;
        None if there is none."""
        upper = log.high_watermark
        if sp.start_offset is None:
            reset = str(self._config(sp.group_id, "share.auto.offset.reset")).lower()
            sp.start_offset = log.log_start_offset if reset == "earliest" else upper
            sp.end_offset = sp.start_offset
        if sp.start_offset < log.log_start_offset:
            # Records deleted under the share-partition: gone, as archived ones.
            for offset in range(sp.start_offset, min(log.log_start_offset, sp.end_offset)):
                sp.records.pop(offset, None)
            sp.start_offset = log.log_start_offset
            sp.end_offset = max(sp.end_offset, sp.start_offset)
        first = next((o for o in range(sp.start_offset, sp.end_offset)
                      if sp.records[o].state == AVAILABLE), sp.end_offset)
        if first >= upper or max_records <= 0:
            return None
        read = log.read(first, max(max_bytes, 1), upper, min_one=True)
        if read is None:
            return None
        data = os.pread(read.file.fileno(), read.size, read.position)
        lock_ms = self._config(sp.group_id, "share.record.lock.duration.ms")
        acquisition = next(self._acquisitions)
        taken: List[int] = []
        keep_bytes = 0
        for h in iter_batch_headers(data):
            if len(taken) >= max_records:
                break
            took_here = False
            for offset in range(max(h.base_offset, first), h.last_offset + 1):
                if offset >= sp.end_offset:
                    # Past the records fetched so far: new in-flight records (a control
                    # record is no record to deliver: archived at once).
                    sp.records[offset] = InFlightRecord(ARCHIVED if h.is_control else AVAILABLE)
                    sp.end_offset = offset + 1
                record = sp.records.get(offset)
                if record is None or record.state != AVAILABLE or h.is_control:
                    continue
                if len(taken) >= max_records:
                    break
                record.state = ACQUIRED
                record.owner = member_id
                record.delivery_count += 1
                record.acquisition = acquisition
                taken.append(offset)
                took_here = True
            if took_here:
                keep_bytes = h.position + h.size
        sp.advance_start()
        if not taken:
            return None
        self.server.loop.call_later(lock_ms / 1000, self._lock_expired, sp, acquisition)
        runs: List[Acquired] = []
        for offset in taken:
            count = sp.records[offset].delivery_count
            last = runs[-1] if runs else None
            if last is not None and last.last_offset + 1 == offset and \
                    last.delivery_count == count:
                runs[-1] = Acquired(last.first_offset, offset, count)
            else:
                runs.append(Acquired(offset, offset, count))
        return AcquireResult(data[:keep_bytes], runs)

    def _lock_expired(self, sp: SharePartition, acquisition: int) -> None:
        limit = self._config(sp.group_id, "share.delivery.count.limit")
        released = False
        for record in sp.records.values():
            if record.state == ACQUIRED and record.acquisition == acquisition:
                sp.release(record, limit)
                released = True
        if released:
            sp.advance_start()
            self._wake(sp)

    def _wake(self, sp: SharePartition) -> None:
        """Records became available: the waiting ShareFetches of the partition look again."""
        for broker in self.server.brokers.values():
            broker.notify_data((sp.topic, sp.partition))

    # -- acknowledging ---------------------------------------------------------------
    def acknowledge(self, sp: SharePartition, member_id: str, batches: List[Any]) -> int:
        """Apply one partition's acknowledgement batches, all or none: the error."""
        changes: List[Tuple[InFlightRecord, int]] = []
        seen: Set[int] = set()
        for b in batches:
            types = list(b.acknowledge_types)
            span = b.last_offset - b.first_offset + 1
            if span <= 0 or len(types) not in (1, span) or \
                    any(t not in AcknowledgeType._value2member_map_ for t in types):
                return ErrorCode.INVALID_REQUEST
            for i, offset in enumerate(range(b.first_offset, b.last_offset + 1)):
                if offset in seen or sp.start_offset is None or \
                        not sp.start_offset <= offset < sp.end_offset:
                    return ErrorCode.INVALID_RECORD_STATE
                record = sp.records[offset]
                if record.state != ACQUIRED or record.owner != member_id:
                    return ErrorCode.INVALID_RECORD_STATE
                seen.add(offset)
                changes.append((record, types[i if len(types) > 1 else 0]))
        limit = self._config(sp.group_id, "share.delivery.count.limit")
        released = False
        for record, kind in changes:
            if kind == AcknowledgeType.ACCEPT:
                record.state, record.owner, record.acquisition = ACKNOWLEDGED, None, 0
            elif kind == AcknowledgeType.RELEASE:
                sp.release(record, limit)
                released = released or record.state == AVAILABLE
            else:   # REJECT, or GAP (no record there)
                record.state, record.owner, record.acquisition = ARCHIVED, None, 0
        sp.advance_start()
        if released:
            self._wake(sp)
        return ErrorCode.NONE

    def release_member(self, group_id: str, member_id: str,
                       only: Optional[Set[Tuple[uuid.UUID, int]]] = None) -> int:
        """Release the records the member holds in the group's share-partitions (those
        of ``only``, if given); returns how many."""
        limit = self._config(group_id, "share.delivery.count.limit")
        count = 0
        for (gid, tid, p), sp in self.partitions.items():
            if gid != group_id or (only is not None and (tid, p) not in only):
                continue
            mine = [r for r in sp.records.values()
                    if r.state == ACQUIRED and r.owner == member_id]
            for record in mine:
                sp.release(record, limit)
            if mine:
                count += len(mine)
                sp.advance_start()
                self._wake(sp)
        return count

    def forget(self, group_id: Optional[str] = None,
               topic_ids: Optional[Set[uuid.UUID]] = None) -> None:
        """Drop the share-partitions of a deleted group, or of the topics not among
        ``topic_ids`` (deleted ones)."""
        for key in list(self.partitions):
            gid, tid, _ = key
            if gid == group_id or (topic_ids is not None and tid not in topic_ids):
                del self.partitions[key]

    def member_gone(self, group_id: str, member_id: str) -> None:
        """The member left the group or its session expired: its records go back, and its
        share sessions are closed."""
        self.release_member(group_id, member_id)
        for key in [k for k in self.sessions if k[1:] == (group_id, member_id)]:
            del self.sessions[key]

    def broker_stopped(self, broker_id: int) -> None:
        """A broker's share sessions are in its memory only: they end with it (its
        partitions' new leaders release the records they held, see leader_changed)."""
        for key in [k for k in self.sessions if k[0] == broker_id]:
            del self.sessions[key]

    def leader_changed(self, topic: str, index: int) -> None:
        """A partition's leader changed: the acquisition locks were the old leader's
        memory (Kafka persists acknowledgements and delivery counts with the share
        coordinator, never acquisitions), so the new leader has the records acquired
        there available again; an acknowledgement of one then finds it not acquired."""
        for (_gid, _tid, p), sp in self.partitions.items():
            if sp.topic != topic or p != index:
                continue
            limit = self._config(sp.group_id, "share.delivery.count.limit")
            held = [r for r in sp.records.values() if r.state == ACQUIRED]
            for record in held:
                sp.release(record, limit)
            if held:
                sp.advance_start()
                self._wake(sp)

    # -- sessions --------------------------------------------------------------------
    def session_for(self, broker: "Broker", group_id: str, member_id: str, epoch: int,
                    opening: bool) -> Tuple[int, Optional[ShareSession]]:
        """The error of the request's share session epoch, and the session. ``opening``:
        a ShareFetch may open one with epoch 0, a ShareAcknowledge may not."""
        key = (broker.broker_id, group_id, member_id)
        if epoch == FetchSessionEpoch.INITIAL:
            if not opening:
                return ErrorCode.INVALID_SHARE_SESSION_EPOCH, None
            session = self.sessions[key] = ShareSession(group_id, member_id)
            return ErrorCode.NONE, session
        existing = self.sessions.get(key)
        if existing is None:
            return ErrorCode.SHARE_SESSION_NOT_FOUND, None
        if epoch == FetchSessionEpoch.FINAL:
            return ErrorCode.NONE, existing
        if epoch != existing.next_epoch:
            return ErrorCode.INVALID_SHARE_SESSION_EPOCH, None
        existing.next_epoch = epoch + 1 if epoch < (1 << 31) - 1 else 1
        return ErrorCode.NONE, existing

    def bind(self, broker: "Broker", session: ShareSession, conn: Any) -> None:
        """The session opened on ``conn``: it ends when that connection closes (Kafka's
        share session cache listens for disconnections), giving the member's records of
        its partitions back. A session opened again meanwhile (epoch 0, perhaps on
        another connection) is another one, which that close leaves alone."""
        def closed() -> None:
            key = (broker.broker_id, session.group_id, session.member_id)
            if self.sessions.get(key) is session:
                self.close_session(broker, session)
        conn.on_close(closed)

    def end_session(self, broker: "Broker", group_id: str, member_id: str) -> None:
        """End the member's share session on ``broker``, if any, releasing its records."""
        session = self.sessions.get((broker.broker_id, group_id, member_id))
        if session is not None:
            self.close_session(broker, session)

    def close_session(self, broker: "Broker", session: ShareSession) -> None:
        self.sessions.pop((broker.broker_id, session.group_id, session.member_id), None)
        self.release_member(session.group_id, session.member_id, set(session.partitions))


# --------------------------------------------------------------------------- requests


def _leader_of(ctx: RequestContext, topic: Optional[str], index: int
               ) -> Tuple[int, Any, Any]:
    """(error, replica, partition info) for a share-partition this broker must lead."""
    if topic is None:
        return ErrorCode.UNKNOWN_TOPIC_ID, None, None
    if not ctx.allowed(AclOperation.READ, AclResourceType.TOPIC, topic):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED, None, None
    error, replica = ctx.broker.leader_replica(topic, index)
    return error, replica, ctx.broker.controller.partition(topic, index)


def _topic_name(ctx: RequestContext, topic_id: uuid.UUID) -> Optional[str]:
    info = ctx.broker.controller.topics_by_id.get(topic_id)
    return info.name if info is not None else None


def _node_endpoints(ctx: RequestContext, leaders: Set[int], R: Any) -> List[Any]:
    brokers = ctx.server.brokers
    return [R.NodeEndpoint(node_id=b, host=brokers[b].host, port=brokers[b].client_port,
                           rack=brokers[b].rack)
            for b in sorted(leaders) if b in brokers and brokers[b].up]


def _acknowledged(ctx: RequestContext, topics: List[Any]) -> List[List[Any]]:
    """The request's acknowledgement batches, for the request log: ``[[topic,
    partition, first offset, last offset, [types]], ...]`` (the topic None if unknown)."""
    return [[_topic_name(ctx, t.topic_id), p.partition_index, b.first_offset,
             b.last_offset, list(b.acknowledge_types)]
            for t in topics for p in t.partitions
            for b in p.acknowledgement_batches or ()]


def _check_ids(req: Any) -> Optional[str]:
    if not req.group_id:
        return "GroupId can't be empty."
    if not req.member_id:
        return "MemberId can't be empty."
    return None


class _ShareFetchOperation(LongPoll):
    """One ShareFetch: the session, the acknowledgements, then records acquired at once
    or when some come (within MaxWaitMs)."""

    def __init__(self, ctx: RequestContext) -> None:
        super().__init__(ctx)
        self.state: ShareFetchState = ctx.server.share_fetch
        self.session: Optional[ShareSession] = None
        self.ack_errors: Dict[Tuple[uuid.UUID, int], int] = {}

    def start(self) -> None:
        ctx, req = self.ctx, self.ctx.request
        ctx.note(group_id=req.group_id, member_id=req.member_id,
                 share_session_epoch=req.share_session_epoch,
                 max_records=req.max_records if ctx.version >= 1 else None,
                 acknowledged=_acknowledged(ctx, req.topics))
        message = _check_ids(req)
        acks = [(t.topic_id, p) for t in req.topics for p in t.partitions
                if p.acknowledgement_batches]
        if message is None and req.share_session_epoch == FetchSessionEpoch.INITIAL and acks:
            message = "Acknowledge data is present on the initial ShareFetch of a session."
        if message is not None:
            self._fail(ErrorCode.INVALID_REQUEST, message)
            return
        if not ctx.allowed(AclOperation.READ, AclResourceType.GROUP, req.group_id):
            self._fail(ErrorCode.GROUP_AUTHORIZATION_FAILED)
            return
        error, session = self.state.session_for(ctx.broker, req.group_id, req.member_id,
                                                req.share_session_epoch, opening=True)
        if error:
            self._fail(error)
            return
        assert session is not None           # session_for gives one when no error
        self.session = session
        if req.share_session_epoch == FetchSessionEpoch.INITIAL:
            self.state.bind(ctx.broker, session, ctx.conn)
        for t in req.topics:
            for p in t.partitions:
                session.partitions[(t.topic_id, p.partition_index)] = None
                if p.acknowledgement_batches:
                    self.ack_errors[(t.topic_id, p.partition_index)] = self._acknowledge(
                        t.topic_id, p.partition_index, p.acknowledgement_batches)
        # Forgotten after the named ones are added, as Kafka's share session update: a
        # partition named for its acknowledgements and forgotten leaves the session.
        for t in req.forgotten_topics_data:
            for p in t.partitions:
                session.partitions.pop((t.topic_id, p), None)
        ctx.note(session_partitions=sorted([_topic_name(ctx, tid), p]
                                           for tid, p in session.partitions))
        if req.share_session_epoch == FetchSessionEpoch.FINAL:
            self.state.close_session(ctx.broker, session)
            self._answer(fetch=False)
            return
        if self._try(final=req.max_wait_ms <= 0 or bool(self.ack_errors)):
            return
        for tid, p in session.partitions:
            name = _topic_name(ctx, tid)
            if name is not None:
                self.keys.append((name, p))
        self._wait(req.max_wait_ms)

    def _acknowledge(self, topic_id: uuid.UUID, index: int, batches: List[Any]) -> int:
        ctx = self.ctx
        name = _topic_name(ctx, topic_id)
        error, _, _ = _leader_of(ctx, name, index)
        if error or name is None:            # (no name: an error, UNKNOWN_TOPIC_ID)
            return error
        sp = self.state.partition(ctx.request.group_id, name, topic_id, index)
        return self.state.acknowledge(sp, ctx.request.member_id, batches)

    def _fail(self, code: int, message: Optional[str] = None) -> None:
        self.ctx.respond(ShareFetchResponse(error_code=code, error_message=message))

    def _answer(self, fetch: bool) -> None:
        self._finish()
        self._respond(self._read()[0] if fetch else self._partitions({}))

    def _partitions(self, fetched: Dict[Tuple[uuid.UUID, int], Any]
                    ) -> Dict[Tuple[uuid.UUID, int], Any]:
        """Add a partition answer for each acknowledgement not answered already."""
        R = ShareFetchResponse
        for key, code in self.ack_errors.items():
            if key not in fetched:
                fetched[key] = R.PartitionData(partition_index=key[1],
                                               error_code=ErrorCode.NONE,
                                               acknowledge_error_code=code,
                                               current_leader=self._leader(key),
                                               records=NO_RECORDS)
        return fetched

    def _leader(self, key: Tuple[uuid.UUID, int]) -> Any:
        name = _topic_name(self.ctx, key[0])
        part = self.ctx.broker.controller.partition(name, key[1]) if name else None
        return ShareFetchResponse.LeaderIdAndEpoch(
            leader_id=part.leader if part is not None else -1,
            leader_epoch=part.leader_epoch if part is not None else -1)

    def _read(self) -> Tuple[Dict[Tuple[uuid.UUID, int], Any], bool]:
        """The partition answers, and whether they are worth sending now."""
        ctx, req = self.ctx, self.ctx.request
        R = ShareFetchResponse
        out: Dict[Tuple[uuid.UUID, int], Any] = {}
        max_records = req.max_records if ctx.version >= 1 else DEFAULT_MAX_RECORDS
        budget = req.max_bytes
        urgent = False
        # A session that ended while this fetch waited (closed, replaced, its connection
        # gone) holds no records: what it acquired now would be nobody's until the lock
        # expired (Kafka completes a waiting share fetch of an ended session empty).
        session = self.session
        current = session is not None and self.state.sessions.get(
            (ctx.broker.broker_id, req.group_id, req.member_id)) is session
        for key in list(session.partitions) if session is not None and current else []:
            tid, index = key
            name = _topic_name(ctx, tid)
            error, replica, part = _leader_of(ctx, name, index)
            if error or name is None:        # (no name: an error, UNKNOWN_TOPIC_ID)
                urgent = True
                out[key] = R.PartitionData(partition_index=index, error_code=error,
                                           acknowledge_error_code=self.ack_errors.get(
                                               key, ErrorCode.NONE),
                                           current_leader=self._leader(key),
                                           records=NO_RECORDS)
                continue
            if max_records <= 0 or budget <= 0:
                continue
            sp = self.state.partition(req.group_id, name, tid, index)
            got = self.state.acquire(sp, req.member_id, replica.log, max_records, budget)
            if got is None:
                continue
            max_records -= sum(a.last_offset - a.first_offset + 1 for a in got.acquired)
            budget -= len(got.records)
            out[key] = R.PartitionData(
                partition_index=index, error_code=ErrorCode.NONE,
                acknowledge_error_code=self.ack_errors.get(key, ErrorCode.NONE),
                current_leader=self._leader(key), records=got.records,
                acquired_records=[R.AcquiredRecords(first_offset=a.first_offset,
                                                    last_offset=a.last_offset,
                                                    delivery_count=a.delivery_count)
                                  for a in got.acquired])
        ready = urgent or any(p.acquired_records for p in out.values())
        return self._partitions(out), ready

    def _respond(self, partitions: Dict[Tuple[uuid.UUID, int], Any]) -> None:
        ctx = self.ctx
        R = ShareFetchResponse
        topics: Dict[uuid.UUID, Any] = {}
        leaders: Set[int] = set()
        acquired: List[Tuple[Optional[str], int, int, int, int]] = []
        for (tid, index), data in partitions.items():
            topics.setdefault(tid, R.ShareFetchableTopicResponse(topic_id=tid, partitions=[]))
            topics[tid].partitions.append(data)
            if data.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER and \
                    data.current_leader.leader_id >= 0:
                leaders.add(data.current_leader.leader_id)
            acquired.extend((_topic_name(ctx, tid), index, a.first_offset, a.last_offset,
                             a.delivery_count) for a in data.acquired_records)
        ctx.note(acquired=acquired,
                 acknowledge_errors={f"{_topic_name(ctx, t)}-{p}": ErrorCode(c).name
                                     for (t, p), c in self.ack_errors.items()})
        lock_ms = self.state._config(ctx.request.group_id, "share.record.lock.duration.ms")
        ctx.respond(R(error_code=ErrorCode.NONE, acquisition_lock_timeout_ms=lock_ms,
                      responses=list(topics.values()),
                      node_endpoints=_node_endpoints(ctx, leaders, R)))


@handles(ApiKey.SHARE_FETCH)
def share_fetch(ctx: RequestContext) -> None:
    _ShareFetchOperation(ctx).start()


@error_answer(ApiKey.SHARE_FETCH)
def share_fetch_error(request: Any, version: int, code: int) -> Any:
    return ShareFetchResponse(error_code=code)


@handles(ApiKey.SHARE_ACKNOWLEDGE)
def share_acknowledge(ctx: RequestContext) -> None:
    req = ctx.request
    R = ShareAcknowledgeResponse
    state: ShareFetchState = ctx.server.share_fetch
    ctx.note(group_id=req.group_id, member_id=req.member_id,
             share_session_epoch=req.share_session_epoch,
             acknowledged=_acknowledged(ctx, req.topics))
    message = _check_ids(req)
    if message is not None:
        ctx.respond(R(error_code=ErrorCode.INVALID_REQUEST, error_message=message))
        return
    if not ctx.allowed(AclOperation.READ, AclResourceType.GROUP, req.group_id):
        ctx.respond(R(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED))
        return
    error, session = state.session_for(ctx.broker, req.group_id, req.member_id,
                                       req.share_session_epoch, opening=False)
    if error:
        ctx.respond(R(error_code=error))
        return
    assert session is not None               # session_for gives one when no error
    topics = []
    leaders: Set[int] = set()
    errors = {}
    for t in req.topics:
        name = _topic_name(ctx, t.topic_id)
        out = R.ShareAcknowledgeTopicResponse(topic_id=t.topic_id, partitions=[])
        for p in t.partitions:
            code, _, part = _leader_of(ctx, name, p.partition_index)
            if not code and name is not None:  # (no name: an error, UNKNOWN_TOPIC_ID)
                sp = state.partition(req.group_id, name, t.topic_id, p.partition_index)
                code = state.acknowledge(sp, req.member_id, p.acknowledgement_batches)
            leader = R.LeaderIdAndEpoch(leader_id=part.leader if part else -1,
                                        leader_epoch=part.leader_epoch if part else -1)
            if code == ErrorCode.NOT_LEADER_OR_FOLLOWER and part is not None and \
                    part.leader >= 0:
                leaders.add(part.leader)
            errors[f"{name}-{p.partition_index}"] = ErrorCode(code).name
            out.partitions.append(R.PartitionData(partition_index=p.partition_index,
                                                  error_code=code, current_leader=leader))
        topics.append(out)
    if req.share_session_epoch == FetchSessionEpoch.FINAL:
        state.close_session(ctx.broker, session)
    ctx.note(acknowledge_errors=errors)
    ctx.respond(R(error_code=ErrorCode.NONE, responses=topics,
                  node_endpoints=_node_endpoints(ctx, leaders, R)))


@error_answer(ApiKey.SHARE_ACKNOWLEDGE)
def share_acknowledge_error(request: Any, version: int, code: int) -> Any:
    return ShareAcknowledgeResponse(error_code=code)
