"""The data APIs: Produce, Fetch (clients and followers), ListOffsets,
OffsetForLeaderEpoch and DeleteRecords.

Fetch answers carry the records of each partition as one range of one segment file:
the response is encoded with a placeholder for each range, and the broker sends the
ranges with ``os.sendfile`` in their place (``_broker.send_response``).
"""
from __future__ import annotations

import os
from collections import Counter
from typing import Any, Dict, List, Optional, Tuple

from kafka_proto.enums import (
    AclOperation, AclResourceType, FetchSessionEpoch, IsolationLevel, ListOffsetsTimestamp,
)
from kafka_proto.errors import ErrorCode, KafkaProtocolError
from kafka_proto.messages import (
    ApiKey,
    DeleteRecordsResponse,
    FetchResponse,
    ListOffsetsResponse,
    OffsetForLeaderEpochResponse,
    ProduceResponse,
)
from kafka_proto.records import Compression, iter_batch_headers, read_batch_header

from ._acls import CLUSTER_NAME
from ._api import RequestContext, error_answer, handles
from ._downconvert import down_convert, magic_for_fetch, overflow_entry, up_convert
from ._fetch_sessions import (
    NO_SESSION,
    FetchSession,
    PartitionKey,
    SessionPartition,
    next_epoch,
)
from ._long_poll import LongPoll
from ._net import PLACEHOLDER, FileRegion
from ._replica import AppendResult

#: The ListOffsets version that brought each of the later special timestamps (KIP-734,
#: KIP-405, KIP-1005); an older request naming one is answered UNSUPPORTED_VERSION.
_SPECIAL_TIMESTAMP_SINCE = {ListOffsetsTimestamp.MAX_TIMESTAMP: 7,
                            ListOffsetsTimestamp.EARLIEST_LOCAL: 8,
                            ListOffsetsTimestamp.LATEST_TIERED: 9}

_NO_EPOCH_END = FetchResponse.EpochEndOffset


# --------------------------------------------------------------------------- Produce


def _produce_partition(index: int, result: AppendResult, log_start: int = -1,
                       leader: Optional[Tuple[int, int]] = None) -> Any:
    p = ProduceResponse.PartitionProduceResponse(
        index=index, error_code=result.error, base_offset=result.base_offset,
        log_append_time_ms=result.log_append_time, log_start_offset=log_start,
        error_message=result.message if result.error else None)
    if leader is not None:
        p.current_leader = ProduceResponse.LeaderIdAndEpoch(leader_id=leader[0],
                                                            leader_epoch=leader[1])
    return p


@error_answer(ApiKey.PRODUCE)
def produce_error(request: Any, version: int, code: int) -> Any:
    return ProduceResponse(responses=[
        ProduceResponse.TopicProduceResponse(name=t.name, partition_responses=[
            _produce_partition(p.index, AppendResult(code)) for p in t.partition_data])
        for t in request.topic_data])


def produce_summary(request: Any) -> List[Dict[str, Any]]:
    """Per partition of a ProduceRequest: topic, partition and its batch's producer id,
    epoch, base sequence and record count (for the request log)."""
    out = []
    for t in request.topic_data:
        for pd in t.partition_data:
            entry: Dict[str, Any] = {"topic": t.name, "partition": pd.index}
            entry.update(_batch_summary(pd.records))
            out.append(entry)
    return out


def _batch_summary(records: Any) -> Dict[str, Any]:
    if records is None:
        return {}
    try:
        h = read_batch_header(records)
    except KafkaProtocolError:
        return {}   # not a v2 batch: the append refuses it, with the reason
    return {"producer_id": h.producer_id, "producer_epoch": h.producer_epoch,
            "base_sequence": h.base_sequence, "records": h.records_count}


def _has_transactional_batches(request: Any) -> bool:
    """Whether a ProduceRequest carries a transactional batch (Kafka's
    hasTransactionalRecords, which its authorization looks at)."""
    for t in request.topic_data:
        for pd in t.partition_data:
            try:
                if pd.records is not None and any(
                        h.is_transactional for h in iter_batch_headers(pd.records)):
                    return True
            except KafkaProtocolError:
                continue   # the append refuses it, with the reason
    return False


def _zstd(records: Any) -> bool:
    """Whether a batch of ``records`` is zstd-compressed: Kafka refuses that below Produce
    v7 (KIP-110), whose clients know nothing of zstd, with UNSUPPORTED_COMPRESSION_TYPE."""
    try:
        return records is not None and any(h.compression == Compression.ZSTD
                                           for h in iter_batch_headers(records))
    except KafkaProtocolError:
        return False   # not v2 batches: the append refuses them, with the reason


@handles(ApiKey.PRODUCE)
def produce(ctx: RequestContext) -> None:
    req = ctx.request
    broker = ctx.broker
    acks = req.acks
    # Kafka: transactional batches need WRITE on the request's transactional id (every
    # partition refused otherwise, or without one), each topic WRITE on it.
    txn_refused = ctx.server.authorizer.enabled and _has_transactional_batches(req) and (
        req.transactional_id is None or not ctx.allowed(
            AclOperation.WRITE, AclResourceType.TRANSACTIONAL_ID, req.transactional_id))
    refused = {t.name for t in req.topic_data
               if not ctx.allowed(AclOperation.WRITE, AclResourceType.TOPIC, t.name)}
    # Kafka keeps the last entry of a partition the request names twice (its map of the
    # request's partitions): the earlier ones are neither appended nor answered
    named: Dict[Tuple[str, int], Any] = {}
    for t in req.topic_data:
        for pd in t.partition_data:
            named[(t.name, pd.index)] = pd
    # (topic, partition, result, replica or None)
    results: List[Tuple[str, int, AppendResult, Any]] = []
    for (name, index), pd in named.items():
        if acks not in (-1, 0, 1):
            result, replica = AppendResult(ErrorCode.INVALID_REQUIRED_ACKS), None
        elif txn_refused:
            result = AppendResult(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            replica = None
        elif name in refused:
            result, replica = AppendResult(ErrorCode.TOPIC_AUTHORIZATION_FAILED), None
        else:
            error, replica = broker.leader_replica(name, index)
            if error or replica is None:  # (None only with an error)
                result = AppendResult(error)
            elif ctx.version < 7 and _zstd(pd.records):
                result = AppendResult(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, message=(
                    f"Produce v{ctx.version} may not carry zstd batches (v7+, KIP-110)"))
            elif ctx.version < 3:
                # a legacy message set: stored as one v2 batch, as Kafka 3 stores it
                batch, error, why = up_convert(bytes(pd.records or b""))
                result = AppendResult(error, message=why) if error else \
                    replica.append_records(batch, acks)
            else:
                result = replica.append_records(pd.records, acks)
        results.append((name, index, result, replica))
    logged = {(entry["topic"], entry["partition"]): entry
              for entry in (ctx.log_entry["partitions"] if ctx.log_entry else [])}
    for topic, index, result, _r in results:
        entry = logged.get((topic, index))    # the last entry of the partition
        if entry is not None:
            entry["error"] = int(result.error)
            entry["base_offset"] = result.base_offset
    ctx.note(acks=acks)
    if acks == 0:
        ctx.no_response()
        return
    final: Dict[Tuple[str, int], AppendResult] = {(t, p): r for t, p, r, _ in results}
    waiting: Dict[Tuple[str, int], Any] = {}

    def respond() -> None:
        by_topic: Dict[str, List[Any]] = {}
        endpoints = {}
        for topic, index, _r, replica in results:
            result = final[(topic, index)]
            leader = None
            if result.error == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                part = broker.controller.partition(topic, index)
                if part is not None and part.leader >= 0:
                    leader = (part.leader, part.leader_epoch)
                    endpoints[part.leader] = broker.server.brokers[part.leader]
            log_start = replica.log.log_start_offset if replica is not None and \
                result.error == ErrorCode.NONE else -1
            by_topic.setdefault(topic, []).append(_produce_partition(index, result, log_start,
                                                                     leader))
        response = ProduceResponse(responses=[
            ProduceResponse.TopicProduceResponse(name=t, partition_responses=ps)
            for t, ps in by_topic.items()])
        if ctx.version >= 10 and endpoints:
            response.node_endpoints = [
                ProduceResponse.NodeEndpoint(node_id=b.broker_id, host=b.host,
                                             port=b.client_port)
                for b in endpoints.values()]
        ctx.respond(response)

    if acks == -1:
        for topic, index, result, replica in results:
            if result.error == ErrorCode.NONE and result.required_offset >= 0:
                waiting[(topic, index)] = replica
    if not waiting:
        respond()
        return

    timer = None

    def make_callback(key: Tuple[str, int]):
        def done(error: int) -> None:
            if key not in waiting:
                return
            del waiting[key]
            if error:
                final[key] = AppendResult(error)
            if not waiting:
                if timer is not None:
                    timer.cancel()
                ctx.conn.forget_on_close(abandoned)
                respond()
        return done

    def stop_waiting() -> None:
        for key, replica in list(waiting.items()):
            replica.cancel_wait(callbacks[key])
            final[key] = AppendResult(ErrorCode.REQUEST_TIMED_OUT,
                                      message="the in-sync replicas did not confirm in time")
        waiting.clear()

    def timed_out() -> None:
        ctx.conn.forget_on_close(abandoned)
        stop_waiting()
        respond()

    def abandoned() -> None:
        """The client left: nobody to answer (the records stay written, as in Kafka)."""
        if timer is not None:
            timer.cancel()
        stop_waiting()

    callbacks = {key: make_callback(key) for key in waiting}
    ctx.conn.on_close(abandoned)
    for key, replica in list(waiting.items()):
        # May call back at once (replicated already): then answered, nothing to wait for.
        replica.wait_for_replicas(final[key].required_offset, callbacks[key])
    if waiting:
        timer = broker.loop.call_later(max(req.timeout_ms, 0) / 1000, timed_out)


# --------------------------------------------------------------------------- Fetch


def _fetch_partition(index: int, error: int, **fields: Any) -> Any:
    return FetchResponse.PartitionData(partition_index=index, error_code=error,
                                       high_watermark=fields.pop("high_watermark", -1),
                                       last_stable_offset=fields.pop("last_stable_offset", -1),
                                       log_start_offset=fields.pop("log_start_offset", -1),
                                       records=fields.pop("records", b""), **fields)


@error_answer(ApiKey.FETCH)
def fetch_error(request: Any, version: int, code: int) -> Any:
    return FetchResponse(session_id=0, responses=[
        FetchResponse.FetchableTopicResponse(topic=t.topic, topic_id=t.topic_id, partitions=[
            _fetch_partition(p.partition, code) for p in t.partitions])
        for t in request.topics])


class _Wanted:
    """A partition a Fetch reads: from the request, or from its incremental session."""

    __slots__ = ("key", "topic", "topic_id", "name", "params")

    def __init__(self, key: PartitionKey, topic: str, topic_id: Any, name: Optional[str],
                 params: Any) -> None:
        self.key = key
        #: The answer's topic fields: the name before v13, the id from v13 on.
        self.topic = topic
        self.topic_id = topic_id
        #: The topic's name (None: an unknown topic id).
        self.name = name
        #: ``FetchRequest.FetchPartition`` or a ``SessionPartition``: same attributes.
        self.params = params


class _Read:
    """One partition's answer in the making."""

    __slots__ = ("wanted", "data", "region", "summary")

    def __init__(self, wanted: _Wanted, data: Any, region: Optional[FileRegion],
                 summary: Optional[Dict[str, Any]]) -> None:
        self.wanted = wanted
        self.data = data
        self.region = region
        self.summary = summary


class _FetchOperation(LongPoll):
    """One Fetch request, answered at once or when enough data is there.

    KIP-227: the request's session metadata makes it sessionless (epoch -1), full (epoch
    0: a session is made when it is answered, if the broker's cache has room) or
    incremental (another epoch: the session's partitions are read, and only those with
    something new are answered); see ``_fetch_sessions``.

    KIP-392: a consumer's Fetch v11+ is served by any replica, a follower up to its own
    high watermark (Kafka serves them whether or not a replica selector is configured);
    earlier versions and followers' fetches need the leader. With a replica selector the
    leader answers a consumer's Fetch that carries a rack with the preferred read replica
    and no records when that is a follower, and answers a follower's waiting Fetch as
    soon as its high watermark passed the one it last sent that follower, so that
    followers know the high watermark within a round trip.
    """

    def __init__(self, ctx: RequestContext) -> None:
        super().__init__(ctx)
        req = ctx.request
        self.version = ctx.version
        replica_id = req.replica_id
        if self.version >= 15 and req.replica_state.replica_id >= 0:
            replica_id = req.replica_state.replica_id
        self.follower = replica_id if replica_id >= 0 else None
        self.read_committed = req.isolation_level == IsolationLevel.READ_COMMITTED
        self.leader_only = self.follower is not None or self.version < 11
        #: A consumer's Fetch needs READ on each topic (checked at every read, as the
        #: ACLs may change while it waits); a replica's CLUSTER_ACTION on the cluster
        #: (the followers' connections are the brokers' own and pass), else Kafka answers
        #: every partition TOPIC_AUTHORIZATION_FAILED.
        self.check_read = self.follower is None and ctx.server.authorizer.enabled
        self.follower_refused = self.follower is not None and not ctx.allowed(
            AclOperation.CLUSTER_ACTION, AclResourceType.CLUSTER, CLUSTER_NAME)
        selector = ctx.broker.settings.rack_aware_selector
        self.client_rack = req.rack_id if selector and self.follower is None and \
            self.version >= 11 else ""
        self.propagate_hw = selector and self.follower is not None
        #: The high watermarks given to the fetching follower by the last read.
        self.sent_hw: List[Tuple[Any, int]] = []
        self.hw_behind = False
        if ctx.log_entry is not None and self.version >= 11 and req.rack_id:
            ctx.note(rack_id=req.rack_id)
        self.uses_topic_ids = self.version >= 13
        #: A consumer's Fetch below v4 reads legacy message sets (None: the stored v2).
        legacy = magic_for_fetch(self.version)
        self.legacy_magic = legacy if legacy < 2 and self.follower is None else None
        self.requested: List[_Wanted] = []
        for t in req.topics:
            name = self._topic_name(t)
            ref = t.topic_id if self.uses_topic_ids else t.topic
            topic = "" if self.uses_topic_ids else t.topic
            self.requested.extend(_Wanted((ref, p.partition), topic, t.topic_id, name, p)
                                  for p in t.partitions)
        self.forgotten: List[Tuple[PartitionKey, Optional[str]]] = []
        for t in req.forgotten_topics_data:
            name = self._topic_name(t)
            ref = t.topic_id if self.uses_topic_ids else t.topic
            self.forgotten.extend(((ref, p), name) for p in t.partitions)
        #: What this Fetch reads (``keys``: the watch keys of the named ones).
        self.wanted: List[_Wanted] = []
        #: "sessionless", "full" or "incremental"; the incremental session, and the
        #: epoch it must still expect when answered (else another request overtook it).
        self.kind = "sessionless"
        self.session: Optional[FetchSession] = None
        self.expected_epoch = 0
        self.session_log: Dict[str, Any] = {}

    def _topic_name(self, t: Any) -> Optional[str]:
        if not self.uses_topic_ids:
            return t.topic
        info = self.ctx.broker.controller.topics_by_id.get(t.topic_id)
        return info.name if info is not None else None

    def start(self) -> None:
        error = self._open_session()
        if error:
            self.ctx.note(bytes=0, partitions=[])
            self.session_log["response_id"] = NO_SESSION
            self.ctx.respond(FetchResponse(error_code=error, session_id=NO_SESSION))
            return
        self.keys = [(w.name, w.key[1]) for w in self.wanted if w.name is not None]
        if self.follower is not None and not self.follower_refused:
            self._record_follower_offsets(self.follower)
        req = self.ctx.request
        # Nothing to read is answered at once, as Kafka does.
        if self._try(final=req.max_wait_ms <= 0 or not self.wanted):
            return
        self._wait(req.max_wait_ms)

    def _open_session(self) -> int:
        """Decide what the request is (KIP-227) and what it reads; the session error
        that answers it instead, if any."""
        req = self.ctx.request
        cache = self.ctx.broker.fetch_sessions
        session_id, epoch = req.session_id, req.session_epoch
        if self.ctx.log_entry is not None:
            # Filled in as the request is understood and answered.
            self.session_log = {
                "kind": "sessionless", "id": session_id, "epoch": epoch, "response_id": None,
                "requested": [[w.name, w.key[1], w.params.fetch_offset]
                              for w in self.requested],
                "forgotten": [[name, key[1]] for key, name in self.forgotten]}
            self.ctx.note(fetch_session=self.session_log)
        self.wanted = self.requested
        if epoch in (FetchSessionEpoch.FINAL, FetchSessionEpoch.INITIAL):
            if session_id != NO_SESSION:
                cache.remove(session_id)
            self.kind = "full" if epoch == FetchSessionEpoch.INITIAL else "sessionless"
            self.session_log["kind"] = self.kind
            return ErrorCode.NONE
        self.kind = self.session_log["kind"] = "incremental"
        session = cache.get(session_id)
        if session is None:
            return ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        if session.epoch != epoch:
            return ErrorCode.INVALID_FETCH_SESSION_EPOCH
        if session.uses_topic_ids != self.uses_topic_ids:
            return ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
        session.update([(w.key, w.topic, w.topic_id, w.params) for w in self.requested],
                       [key for key, _name in self.forgotten])
        if not session.partitions:
            # Kafka closes a session left without partitions and answers sessionless.
            cache.remove(session.id)
            return ErrorCode.NONE
        cache.touch(session)
        session.epoch = next_epoch(session.epoch)
        self.session = session
        self.expected_epoch = session.epoch
        by_id = self.ctx.broker.controller.topics_by_id
        wanted = []
        for key, sp in session.partitions.items():
            if self.uses_topic_ids:
                info = by_id.get(sp.topic_id)   # resolved on every read, as Kafka does
                name = info.name if info is not None else None
            else:
                name = sp.topic
            wanted.append(_Wanted(key, sp.topic, sp.topic_id, name, sp))
        self.wanted = wanted
        return ErrorCode.NONE

    def _record_follower_offsets(self, follower: int) -> None:
        broker = self.ctx.broker
        for w in self.wanted:
            if w.name is None:
                continue
            p = w.params
            replica = broker.replicas.get((w.name, p.partition))
            if replica is not None and replica.is_leader and \
                    replica.check_epoch(p.current_leader_epoch) == ErrorCode.NONE and \
                    not self._diverges(replica.log, p):
                # As Kafka: a fetch answered with a diverging epoch says nothing about
                # what the follower has (its offsets past the divergence are not ours).
                replica.on_follower_fetch(follower, p.fetch_offset, p.log_start_offset)

    def _respond(self, reads: List[_Read]) -> None:
        for replica, hw in self.sent_hw:
            replica.high_watermark_sent(self.follower, hw)
        session_id = NO_SESSION
        if self.kind == "full":
            session_id = self._create_session(reads)
        elif self.session is not None:
            session = self.session
            session_id = session.id
            if session.epoch != self.expected_epoch:
                # Another request of the session was served while this one waited.
                self.session_log["response_id"] = session_id
                self.ctx.note(bytes=0, partitions=[])
                self.ctx.respond(FetchResponse(error_code=ErrorCode.INVALID_FETCH_SESSION_EPOCH,
                                               session_id=session_id))
                return
            included = []
            for r in reads:
                sp = r.wanted.params
                if sp.must_answer(r.data, r.region.size if r.region is not None else 0):
                    sp.remember(r.data)
                    session.move_to_end(r.wanted.key)
                    included.append(r)
            reads = included
        self.session_log["response_id"] = session_id
        topics: List[Any] = []
        for r in reads:
            w = r.wanted
            last = topics[-1] if topics else None
            # Consecutive partitions of a topic share its entry, as in Kafka's answers.
            if last is None or last.topic != w.topic or last.topic_id != w.topic_id:
                last = FetchResponse.FetchableTopicResponse(topic=w.topic, topic_id=w.topic_id,
                                                            partitions=[])
                topics.append(last)
            last.partitions.append(r.data)
        regions = [r.region for r in reads if r.region is not None]
        self.ctx.note(bytes=sum(len(r.data.records or b"") if r.region is None else
                                r.region.size for r in reads))
        if self.ctx.log_entry is not None:
            self.ctx.note(partitions=[r.summary for r in reads])
        self.ctx.respond(FetchResponse(session_id=session_id, responses=topics), regions)

    def _create_session(self, reads: List[_Read]) -> int:
        partitions: Dict[PartitionKey, SessionPartition] = {}
        for r in reads:
            w = r.wanted
            sp = SessionPartition(w.topic, w.topic_id, w.params)
            sp.remember(r.data)
            partitions[w.key] = sp
        session = self.ctx.broker.fetch_sessions.create(partitions, self.uses_topic_ids,
                                                        self.follower is not None)
        return session.id if session is not None else NO_SESSION

    def _read(self) -> Tuple[List[_Read], bool]:
        ctx = self.ctx
        req = ctx.request
        total = 0
        urgent = False
        max_bytes = req.max_bytes   # the decoder gives 2**31-1 for versions without it
        logged = ctx.log_entry is not None
        reads: List[_Read] = []
        self.sent_hw = []
        self.hw_behind = False
        for w in self.wanted:
            p = w.params
            if w.name is None:
                urgent = True
                reads.append(_Read(w, _fetch_partition(p.partition, ErrorCode.UNKNOWN_TOPIC_ID),
                                   None, {"topic": None, "partition": p.partition,
                                          "fetch_offset": p.fetch_offset,
                                          "error": int(ErrorCode.UNKNOWN_TOPIC_ID)}
                                   if logged else None))
                continue
            data, region, role = self._read_partition(w.name, p, max_bytes - total, total == 0)
            if data.error_code or (data.diverging_epoch.epoch >= 0 or
                                   data.diverging_epoch.end_offset >= 0) or \
                    data.preferred_read_replica >= 0:
                urgent = True
            size = region.size if region is not None else len(data.records or b"")
            total += size
            summary = None
            if logged:
                summary = {"topic": w.name, "partition": p.partition,
                           "fetch_offset": p.fetch_offset, "error": int(data.error_code),
                           "replica": role, "high_watermark": data.high_watermark,
                           "bytes": size,
                           "preferred_read_replica": data.preferred_read_replica}
            reads.append(_Read(w, data, region, summary))
        return reads, urgent or self.hw_behind or total >= req.min_bytes

    def _diverges(self, log: Any, p: Any) -> bool:
        """Whether the fetcher's log diverged from ``log`` (Fetch v12+: the epoch of its
        last fetched batch ends here before its fetch offset, or is not ours)."""
        if self.version < 12 or p.last_fetched_epoch < 0:
            return False
        epoch, end = log.end_offset_for_epoch(p.last_fetched_epoch)
        return epoch != p.last_fetched_epoch or end < p.fetch_offset

    def _read_partition(self, topic: str, p: Any, budget: int,
                        first: bool) -> Tuple[Any, Optional[FileRegion], Optional[str]]:
        """The partition's answer, the file range of its records, and which replica
        served it (``"leader"``, ``"follower"``, None for an error)."""
        broker = self.ctx.broker
        if self.follower_refused or self.check_read and not self.ctx.allowed(
                AclOperation.READ, AclResourceType.TOPIC, topic):
            return _fetch_partition(p.partition, ErrorCode.TOPIC_AUTHORIZATION_FAILED), \
                None, None
        if self.leader_only:
            error, replica = broker.leader_replica(topic, p.partition)
        else:
            error, replica = broker.local_replica(topic, p.partition)
        if error == ErrorCode.NONE and replica is not None:  # (None only with an error)
            error = replica.check_epoch(p.current_leader_epoch)
        if error or replica is None:
            data = _fetch_partition(p.partition, error)
            part = broker.controller.partition(topic, p.partition)
            if part is not None and self.version >= 12 and part.leader >= 0:
                data.current_leader = FetchResponse.LeaderIdAndEpoch(
                    leader_id=part.leader, leader_epoch=part.leader_epoch)
            return data, None, None
        role = "leader" if replica.is_leader else "follower"
        log = replica.log
        fields = dict(high_watermark=log.high_watermark,
                      last_stable_offset=log.last_stable_offset(),
                      log_start_offset=log.log_start_offset)
        if self.propagate_hw and self.follower is not None and replica.is_leader:
            if replica.follower_needs_high_watermark(self.follower):
                self.hw_behind = True
            self.sent_hw.append((replica, log.high_watermark))
        if self.client_rack:
            preferred = replica.preferred_read_replica(self.client_rack, p.fetch_offset)
            if preferred >= 0:
                # Kafka skips the read: no records, the leader's offsets, and where to go.
                return _fetch_partition(p.partition, ErrorCode.NONE,
                                        preferred_read_replica=preferred, **fields), None, role
        if self._diverges(log, p):
            epoch, end = log.end_offset_for_epoch(p.last_fetched_epoch)
            return _fetch_partition(p.partition, ErrorCode.NONE, diverging_epoch=_NO_EPOCH_END(
                epoch=epoch, end_offset=end), **fields), None, role
        offset = p.fetch_offset
        if offset < log.log_start_offset or offset > log.end_offset:
            return _fetch_partition(p.partition, ErrorCode.OFFSET_OUT_OF_RANGE, **fields), \
                None, role
        if self.follower is not None:
            upper = log.end_offset
        elif self.read_committed:
            upper = log.last_stable_offset()
        else:
            upper = log.high_watermark
        limit = min(p.partition_max_bytes, max(budget, 0))
        # Before Fetch v3 (KIP-74) the byte limits are hard: a first batch above them is
        # not sent whole but cut (see below), in every partition
        hard_limit = self.version <= 2 and self.follower is None
        result = log.read(offset, limit, upper, min_one=first or hard_limit)
        aborted = None
        if self.read_committed and self.follower is None:
            end = result.next_offset if result is not None else offset
            aborted = [FetchResponse.AbortedTransaction(producer_id=a.producer_id,
                                                        first_offset=a.first_offset)
                       for a in log.producer_state.aborted_between(offset, end)]
        if result is None:
            return _fetch_partition(p.partition, ErrorCode.NONE, aborted_transactions=aborted,
                                    **fields), None, role
        if self.legacy_magic is not None:
            # an old consumer: its message format, made from the stored batches (no sendfile)
            if hard_limit and result.size > limit:
                # Kafka reads a cut batch, which converts to nothing: an overflow entry
                # of the limit's size, so the fetcher asks for more
                return _fetch_partition(p.partition, ErrorCode.NONE,
                                        records=overflow_entry(limit), **fields), None, role
            stored = os.pread(result.file.fileno(), result.size, result.position)
            records, error = down_convert(stored, self.legacy_magic, offset)
            if error:
                return _fetch_partition(p.partition, error), None, role
            return _fetch_partition(p.partition, ErrorCode.NONE, records=records,
                                    **fields), None, role
        data = _fetch_partition(p.partition, ErrorCode.NONE, aborted_transactions=aborted,
                                records=PLACEHOLDER.slice(result.size), **fields)
        return data, FileRegion(result.file, result.position, result.size), role


@handles(ApiKey.FETCH)
def fetch(ctx: RequestContext) -> None:
    _FetchOperation(ctx).start()


# --------------------------------------------------------------------------- ListOffsets


def _list_offsets_partition(index: int, error: int, offset: int = -1, timestamp: int = -1,
                            epoch: int = -1) -> Any:
    return ListOffsetsResponse.ListOffsetsPartitionResponse(
        partition_index=index, error_code=error, timestamp=timestamp, offset=offset,
        leader_epoch=epoch)


@error_answer(ApiKey.LIST_OFFSETS)
def list_offsets_error(request: Any, version: int, code: int) -> Any:
    return ListOffsetsResponse(topics=[
        ListOffsetsResponse.ListOffsetsTopicResponse(name=t.name, partitions=[
            _list_offsets_partition(p.partition_index, code) for p in t.partitions])
        for t in request.topics])


def _epoch_for_offset(log: Any, offset: int) -> int:
    epoch = -1
    for e, start in log.epochs:
        if start <= offset:
            epoch = e
    return epoch


def _old_style_offsets(p: Any, log: Any, upper: int) -> Any:
    """ListOffsets v0's answer (Kafka before 0.10.1): up to ``max_num_offsets`` offsets,
    newest first, among the segments' base offsets and the high watermark (LATEST: from
    the high watermark down; EARLIEST: the log start; a timestamp: from the newest segment
    whose records all lie at or before it, Kafka going by the segment file's time)."""
    ts = p.timestamp
    candidates = [(max(seg.base_offset, log.log_start_offset), seg.max_timestamp)
                  for seg in log.segments if not seg.is_empty and seg.base_offset < upper]
    if upper > (candidates[-1][0] if candidates else log.log_start_offset) or not candidates:
        candidates.append((upper, ListOffsetsTimestamp.LATEST))
    if ts == ListOffsetsTimestamp.LATEST:
        start = len(candidates) - 1
    elif ts == ListOffsetsTimestamp.EARLIEST:
        start = 0
    else:
        start = len(candidates) - 1
        while start >= 0 and not 0 <= candidates[start][1] <= ts:
            start -= 1
    count = max(min(p.max_num_offsets, start + 1), 0)
    offsets = [candidates[start - j][0] for j in range(count)]
    return ListOffsetsResponse.ListOffsetsPartitionResponse(
        partition_index=p.partition_index, error_code=ErrorCode.NONE,
        old_style_offsets=sorted(set(offsets), reverse=True))


@handles(ApiKey.LIST_OFFSETS)
def list_offsets(ctx: RequestContext) -> None:
    req = ctx.request
    broker = ctx.broker
    # Kafka answers every occurrence of a partition named twice with INVALID_REQUEST.
    named = Counter((t.name, p.partition_index) for t in req.topics for p in t.partitions)
    topics = []
    for t in req.topics:
        parts = []
        described = ctx.allowed(AclOperation.DESCRIBE, AclResourceType.TOPIC, t.name)
        for p in t.partitions:
            if not described:
                parts.append(_list_offsets_partition(p.partition_index,
                                                     ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            if named[(t.name, p.partition_index)] > 1:
                parts.append(_list_offsets_partition(p.partition_index,
                                                     ErrorCode.INVALID_REQUEST))
                continue
            error, replica = broker.leader_replica(t.name, p.partition_index)
            if error == ErrorCode.NONE and replica is not None:  # (None only with an error)
                error = replica.check_epoch(p.current_leader_epoch)
            if error or replica is None:
                parts.append(_list_offsets_partition(p.partition_index, error))
                continue
            log = replica.log
            committed = req.isolation_level == IsolationLevel.READ_COMMITTED
            upper = log.last_stable_offset() if committed else log.high_watermark
            ts = p.timestamp
            if ctx.version < _SPECIAL_TIMESTAMP_SINCE.get(ts, 0):
                parts.append(_list_offsets_partition(p.partition_index,
                                                     ErrorCode.UNSUPPORTED_VERSION))
                continue
            if ctx.version == 0:
                parts.append(_old_style_offsets(p, log, upper))
                continue
            offset, found_ts = -1, -1
            if ts == ListOffsetsTimestamp.LATEST:
                offset = upper
            elif ts in (ListOffsetsTimestamp.EARLIEST, ListOffsetsTimestamp.EARLIEST_LOCAL):
                offset = log.log_start_offset
            elif ts == ListOffsetsTimestamp.LATEST_TIERED:
                offset = -1
            elif ts == ListOffsetsTimestamp.MAX_TIMESTAMP:
                off, mts = log.max_timestamp_offset()
                if 0 <= off < upper:
                    offset, found_ts = off, mts
            elif ts >= 0:
                found = log.offset_for_timestamp(ts)
                if found is not None and found[0] < upper:
                    offset, found_ts = found
            else:
                parts.append(_list_offsets_partition(p.partition_index,
                                                     ErrorCode.INVALID_REQUEST))
                continue
            latest = ts == ListOffsetsTimestamp.LATEST
            epoch = _epoch_for_offset(log, offset - 1 if latest else offset) \
                if offset >= 0 else -1
            if latest and offset == log.log_start_offset:
                epoch = log.latest_epoch
            parts.append(_list_offsets_partition(p.partition_index, ErrorCode.NONE, offset,
                                                 found_ts, epoch))
        topics.append(ListOffsetsResponse.ListOffsetsTopicResponse(name=t.name, partitions=parts))
    ctx.respond(ListOffsetsResponse(topics=topics))


# --------------------------------------------------------------------------- OffsetForLeaderEpoch


@error_answer(ApiKey.OFFSET_FOR_LEADER_EPOCH)
def offset_for_leader_epoch_error(request: Any, version: int, code: int) -> Any:
    R = OffsetForLeaderEpochResponse
    return R(topics=[R.OffsetForLeaderTopicResult(topic=t.topic, partitions=[
        R.EpochEndOffset(partition=p.partition, error_code=code, leader_epoch=-1, end_offset=-1)
        for p in t.partitions]) for t in request.topics])


@handles(ApiKey.OFFSET_FOR_LEADER_EPOCH)
def offset_for_leader_epoch(ctx: RequestContext) -> None:
    R = OffsetForLeaderEpochResponse
    broker = ctx.broker
    topics = []
    # Kafka: CLUSTER_ACTION on the cluster (a replica's), else DESCRIBE on each topic.
    cluster_action = ctx.allowed(AclOperation.CLUSTER_ACTION, AclResourceType.CLUSTER,
                                 CLUSTER_NAME)
    for t in ctx.request.topics:
        parts = []
        described = cluster_action or ctx.allowed(AclOperation.DESCRIBE,
                                                  AclResourceType.TOPIC, t.topic)
        for p in t.partitions:
            if not described:
                parts.append(R.EpochEndOffset(partition=p.partition, leader_epoch=-1,
                                              error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                              end_offset=-1))
                continue
            error, replica = broker.leader_replica(t.topic, p.partition)
            if error == ErrorCode.NONE and replica is not None:  # (None only with an error)
                error = replica.check_epoch(p.current_leader_epoch)
            if error or replica is None:
                parts.append(R.EpochEndOffset(partition=p.partition, error_code=error,
                                              leader_epoch=-1, end_offset=-1))
                continue
            epoch, end = replica.log.end_offset_for_epoch(p.leader_epoch)
            parts.append(R.EpochEndOffset(partition=p.partition, error_code=ErrorCode.NONE,
                                          leader_epoch=epoch, end_offset=end))
        topics.append(R.OffsetForLeaderTopicResult(topic=t.topic, partitions=parts))
    ctx.respond(R(topics=topics))


# --------------------------------------------------------------------------- DeleteRecords


@error_answer(ApiKey.DELETE_RECORDS)
def delete_records_error(request: Any, version: int, code: int) -> Any:
    R = DeleteRecordsResponse
    return R(topics=[R.DeleteRecordsTopicResult(name=t.name, partitions=[
        R.DeleteRecordsPartitionResult(partition_index=p.partition_index, low_watermark=-1,
                                       error_code=code) for p in t.partitions])
        for t in request.topics])


@handles(ApiKey.DELETE_RECORDS)
def delete_records(ctx: RequestContext) -> None:
    R = DeleteRecordsResponse
    broker = ctx.broker
    topics = []
    moved = False
    for t in ctx.request.topics:
        parts = []
        deletable = ctx.allowed(AclOperation.DELETE, AclResourceType.TOPIC, t.name)
        for p in t.partitions:
            if deletable:
                error, replica = broker.leader_replica(t.name, p.partition_index)
            else:
                error, replica = ErrorCode.TOPIC_AUTHORIZATION_FAILED, None
            low = -1
            if error == ErrorCode.NONE and replica is not None:  # (None only with an error)
                log = replica.log
                offset = log.high_watermark if p.offset == -1 else p.offset
                if offset < 0 or offset > log.high_watermark:
                    error = ErrorCode.OFFSET_OUT_OF_RANGE
                else:
                    if log.delete_records(offset):
                        moved = True
                        broker.notify_data(replica.key)
                    low = log.log_start_offset
            parts.append(R.DeleteRecordsPartitionResult(partition_index=p.partition_index,
                                                        low_watermark=low, error_code=error))
        topics.append(R.DeleteRecordsTopicResult(name=t.name, partitions=parts))
    if moved:
        broker.log_start_changed()
    ctx.respond(R(topics=topics))
