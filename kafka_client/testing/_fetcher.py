"""Followers replicate by Fetch: one connection from each follower broker to each leader
broker it follows, carrying every partition it follows there, Fetch v12 with the
follower's broker id as ``replica_id``.

Each request gives, per partition, the follower's log end offset (which tells the leader
what the follower has) and the epoch of its last batch. A leader whose log differs after
that epoch answers with a diverging epoch instead of records, and the follower truncates
to the end of that epoch before fetching again (KIP-595's replacement for the
OffsetForLeaderEpoch round trip).
"""
from __future__ import annotations

import logging
import socket
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Set, Tuple

from kafka_proto.enums import FetchSessionEpoch, IsolationLevel
from kafka_proto.errors import ErrorCode, KafkaProtocolError
from kafka_proto.messages import FetchRequest
from kafka_proto.protocol import BrokerConversation

from ._fetch_sessions import NO_SESSION
from ._net import StreamConnection, Timer

if TYPE_CHECKING:  # pragma: no cover
    from ._broker import Broker

__all__ = ["ReplicaFetcherManager", "ReplicaFetcher", "REPLICA_FETCH_VERSION"]

_log = logging.getLogger("kafka_client.testing")

REPLICA_FETCH_VERSION = 12
#: Pause before reconnecting to a leader that refused the connection.
_RETRY_DELAY = 0.05


class ReplicaFetcher(StreamConnection):
    """The fetch connection from one follower broker to one leader broker."""

    def __init__(self, manager: "ReplicaFetcherManager", leader_id: int,
                 sock: socket.socket) -> None:
        broker = manager.broker
        super().__init__(broker.loop, sock, broker.settings["socket.request.max.bytes"])
        self.manager = manager
        self.broker = broker
        self.leader_id = leader_id
        self.partitions: Set[Tuple[str, int]] = set()
        self.local_address = sock.getsockname()
        # The client side of the protocol; no ApiVersions handshake: the leader is one of
        # ours and serves Fetch v12.
        self.conversation = BrokerConversation(f"broker-{broker.broker_id}-fetcher")
        self._in_flight: Optional[Dict[Tuple[str, int], int]] = None   # key -> epoch sent

    # -- requests --------------------------------------------------------------------
    def kick(self) -> None:
        if self._in_flight is None and not self.closed:
            self.loop.call_soon(self._send_fetch)

    def _send_fetch(self) -> None:
        if self._in_flight is not None or self.closed:
            return
        broker = self.broker
        # Any: FetchRequest.FetchPartition is a class attribute, not a type, to mypy.
        topics: Dict[str, List[Any]] = {}
        sent: Dict[Tuple[str, int], int] = {}
        max_bytes = broker.settings["replica.fetch.max.bytes"]
        for key in sorted(self.partitions):
            replica = broker.replicas.get(key)
            if replica is None or replica.is_leader:
                continue
            log = replica.log
            topics.setdefault(key[0], []).append(FetchRequest.FetchPartition(
                partition=key[1], current_leader_epoch=replica.part.leader_epoch,
                fetch_offset=log.end_offset, last_fetched_epoch=log.latest_epoch,
                log_start_offset=log.log_start_offset, partition_max_bytes=max_bytes))
            sent[key] = replica.part.leader_epoch
        if not sent:
            return
        request = FetchRequest(
            replica_id=broker.broker_id,
            max_wait_ms=broker.settings["replica.fetch.wait.max.ms"],
            min_bytes=1, max_bytes=max(max_bytes, 10 * 1024 * 1024),
            isolation_level=IsolationLevel.READ_UNCOMMITTED,
            session_id=NO_SESSION, session_epoch=FetchSessionEpoch.FINAL,   # no session
            topics=[FetchRequest.FetchTopic(topic=t, partitions=ps) for t, ps in topics.items()])
        self._in_flight = sent
        self.send(self.conversation.send(request, REPLICA_FETCH_VERSION).parts)

    # -- responses -------------------------------------------------------------------
    def on_frame(self, frame: memoryview) -> None:
        sent, self._in_flight = self._in_flight, None
        if sent is None:
            self.close("response without a request")
            return
        try:
            self.conversation.receive_frame(frame)
            event = self.conversation.next_event()
            # One whole frame answering a request that expects an answer: never None.
            assert event is not None
            response = event.response
        except KafkaProtocolError as exc:
            self.close(f"bad fetch response: {exc}")
            return
        backoff = False
        broker = self.broker
        for topic in response.responses:
            for data in topic.partitions:
                key = (topic.topic, data.partition_index)
                replica = broker.replicas.get(key)
                if replica is None or key not in sent or key not in self.partitions:
                    continue
                part = replica.part
                if replica.is_leader or part.leader != self.leader_id or \
                        part.leader_epoch != sent[key]:
                    continue   # leadership moved while the fetch was out
                error = data.error_code
                if error == ErrorCode.NONE:
                    diverging = data.diverging_epoch
                    if diverging.epoch >= 0 or diverging.end_offset >= 0:
                        if not replica.truncate_for_divergence(diverging.epoch,
                                                               diverging.end_offset):
                            backoff = True   # the same answer again: do not spin on it
                        continue
                    replica.append_as_follower(data.records, data.high_watermark,
                                               data.log_start_offset)
                elif error == ErrorCode.OFFSET_OUT_OF_RANGE:
                    leader = broker.server.brokers.get(self.leader_id)
                    leader_replica = leader.replicas.get(key) if leader is not None else None
                    if leader_replica is not None:
                        log = replica.log
                        if log.end_offset < leader_replica.log.log_start_offset:
                            log.reset_to(leader_replica.log.log_start_offset)
                        else:
                            log.truncate_to(leader_replica.log.end_offset)
                        broker.notify_data(key)
                    backoff = True
                else:
                    backoff = True   # not leader yet / fenced: wait for the controller
        if backoff:
            self.loop.call_later(_RETRY_DELAY, self._send_fetch)
        else:
            self._send_fetch()

    def on_closed(self, reason: str) -> None:
        self._in_flight = None
        self.broker.server.internal_peers.discard(self.local_address)
        self.manager.fetcher_closed(self, reason)


class ReplicaFetcherManager:
    """A broker's fetch connections, one per leader it follows partitions of."""

    def __init__(self, broker: "Broker") -> None:
        self.broker = broker
        self.fetchers: Dict[int, ReplicaFetcher] = {}
        self.assigned: Dict[Tuple[str, int], int] = {}   # key -> leader id
        self._retry_timer: Optional[Timer] = None

    def add_partition(self, key: Tuple[str, int], leader_id: int) -> None:
        old = self.assigned.get(key)
        if old is not None and old != leader_id:
            fetcher = self.fetchers.get(old)
            if fetcher is not None:
                fetcher.partitions.discard(key)
        self.assigned[key] = leader_id
        fetcher = self._fetcher_for(leader_id)
        if fetcher is not None:
            fetcher.partitions.add(key)
            fetcher.kick()

    def remove_partition(self, key: Tuple[str, int]) -> None:
        leader = self.assigned.pop(key, None)
        if leader is not None:
            fetcher = self.fetchers.get(leader)
            if fetcher is not None:
                fetcher.partitions.discard(key)

    def _fetcher_for(self, leader_id: int) -> Optional[ReplicaFetcher]:
        fetcher = self.fetchers.get(leader_id)
        if fetcher is not None and not fetcher.closed:
            return fetcher
        leader = self.broker.server.brokers.get(leader_id)
        if leader is None or not leader.up or not self.broker.up:
            self._schedule_retry()
            return None
        try:
            sock = socket.create_connection((leader.host, leader.port), timeout=1.0)
        except OSError as exc:
            _log.debug("broker %d: cannot reach leader %d: %s", self.broker.broker_id,
                       leader_id, exc)
            self._schedule_retry()
            return None
        # The leader's listener takes this connection as inter-broker: no SASL for it.
        self.broker.server.internal_peers.add(sock.getsockname())
        fetcher = ReplicaFetcher(self, leader_id, sock)
        fetcher.partitions = {k for k, l in self.assigned.items() if l == leader_id}
        self.fetchers[leader_id] = fetcher
        return fetcher

    def _schedule_retry(self) -> None:
        if self._retry_timer is None and self.broker.up:
            self._retry_timer = self.broker.loop.call_later(_RETRY_DELAY, self._retry)

    def _retry(self) -> None:
        self._retry_timer = None
        if not self.broker.up:
            return
        for leader_id in sorted(set(self.assigned.values())):
            fetcher = self._fetcher_for(leader_id)
            if fetcher is not None:
                fetcher.kick()

    def fetcher_closed(self, fetcher: ReplicaFetcher, reason: str) -> None:
        if self.fetchers.get(fetcher.leader_id) is fetcher:
            del self.fetchers[fetcher.leader_id]
        if self.broker.up and any(l == fetcher.leader_id for l in self.assigned.values()):
            self._schedule_retry()

    def stop_all(self) -> None:
        if self._retry_timer is not None:
            self._retry_timer.cancel()
            self._retry_timer = None
        for fetcher in list(self.fetchers.values()):
            fetcher.close("follower stopped")
        self.fetchers.clear()
        self.assigned.clear()
