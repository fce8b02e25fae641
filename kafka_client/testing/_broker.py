"""One broker of the test cluster: its listener and client connections, its partition
replicas (logs under ``<data dir>/broker-<id>/``), its replica fetchers, and the
request pipeline (header, SASL gate, injected faults, handler, response).

Like Kafka, a connection is served one request at a time: the next request is read once
the previous response is fully written, so responses leave in request order.
"""
from __future__ import annotations

import errno
import logging
import os
import shutil
import socket
import time
import traceback
from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Deque, Dict, List, Optional, Set, Tuple

from kafka_proto.errors import ErrorCode, KafkaProtocolError, UnsupportedVersionError
from kafka_proto.framing import (
    decode_request_header,
    encode_response,
    encode_response_header,
    peek_request,
)
from kafka_proto.logdir import (
    LOG_START_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    PartitionOffset,
    decode_offsets_checkpoint,
    encode_offsets_checkpoint,
)
from kafka_proto.messages import (
    ApiKey,
    ApiVersionsResponse,
    api_info,
    error_codes,
    fit_to_version,
    request_class,
)

from . import (  # noqa: F401  (handlers)
    _acls, _api_admin, _api_data, _consumer_groups, _groups, _sasl, _share_fetch, _share_groups,
    _share_offsets, _telemetry, _txn,
)
from ._api import (
    ERROR_ANSWERS, HANDLERS, VALIDATORS, RequestContext, served_api_versions, supported_versions,
)
from ._api_data import produce_summary
from ._controller import PartitionInfo, TopicInfo
from ._fetch_sessions import FetchSessionCache
from ._fetcher import ReplicaFetcherManager
from ._net import PLACEHOLDER, FileRegion, Loop, StreamConnection
from ._replica import Replica
from ._sasl import SESSION_EXPIRED
from .storage import PartitionLog, read_file, replace_file

if TYPE_CHECKING:  # pragma: no cover
    from ._server import ClusterServer

__all__ = ["Broker", "ClientConnection"]

_log = logging.getLogger("kafka_client.testing")

LOOPBACK = "127.0.0.1"

#: How long a listener waits before accepting again when the process is out of descriptors.
_ACCEPT_RETRY_S = 0.1
#: Frames read ahead of the request being served, at most (then reading pauses).
_MAX_QUEUED_FRAMES = 64
#: What a connection may send before (and, for re-authentication, after) its SASL session.
#: The APIs of a member's share session (KIP-932).
SHARE_SESSION_APIS = frozenset((ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE))
_SASL_EXEMPT = frozenset((ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE,
                          ApiKey.SASL_AUTHENTICATE))


class ClientConnection(StreamConnection):
    """A connection accepted by a broker's listener."""

    def __init__(self, broker: "Broker", sock: socket.socket, peer: Tuple[str, int]) -> None:
        super().__init__(broker.loop, sock, broker.settings["socket.request.max.bytes"])
        self.broker = broker
        self.peer = peer
        self.pending: Deque[memoryview] = deque()
        self.busy = False
        # Followers' fetch connections are inter-broker traffic: not authenticated by SASL.
        self.internal = peer in broker.server.internal_peers
        self.authenticated = self.internal or not broker.server.sasl_required
        self.principal: Optional[str] = None
        #: The SASL exchange under way (``_sasl.SaslExchange``), if any.
        self.sasl: Any = None
        #: The mechanism the connection authenticated with, and when its session ends
        #: (monotonic; None: never) (KIP-368).
        self.sasl_mechanism: Optional[str] = None
        self.session_expires: Optional[float] = None
        self._drain_callbacks: List[Callable[[], None]] = []
        #: Requests waiting on this connection (a delayed Fetch or acks=all Produce) let
        #: go when it closes: else each would keep it, and its buffers, until it expires
        #: (max_wait_ms / timeout_ms: up to 24 days) or is woken.
        self._close_callbacks: Set[Callable[[], None]] = set()

    def on_close(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once if the connection closes (see :meth:`forget_on_close`)."""
        if self.closed:
            callback()
        else:
            self._close_callbacks.add(callback)

    def forget_on_close(self, callback: Callable[[], None]) -> None:
        self._close_callbacks.discard(callback)

    def on_frame(self, frame: memoryview) -> None:
        self.pending.append(frame)
        if len(self.pending) >= _MAX_QUEUED_FRAMES:
            self.pause_reading()
        if not self.busy:
            self._serve_next()

    def on_bad_frame(self, reason: str) -> None:
        self.broker.server.request_log.add_event(self.broker.broker_id, "bad_frame", reason)
        self.close(reason)

    def _serve_next(self) -> None:
        if self.busy or self.closed or not self.pending:
            return
        frame = self.pending.popleft()
        if len(self.pending) < _MAX_QUEUED_FRAMES // 2:
            self.resume_reading()
        self.busy = True
        self.broker.handle_frame(self, frame)

    def finished(self) -> None:
        """The current request is answered (or needs no answer): serve the next."""
        if self.out:
            self._drain_callbacks.append(self._next_soon)
        else:
            self._next_soon()

    def _next_soon(self) -> None:
        self.busy = False
        self.loop.call_soon(self._serve_next)

    def on_drained(self) -> None:
        callbacks, self._drain_callbacks = self._drain_callbacks, []
        for cb in callbacks:
            cb()

    def on_closed(self, reason: str) -> None:
        self.pending.clear()
        self._drain_callbacks.clear()
        callbacks, self._close_callbacks = self._close_callbacks, set()
        for callback in callbacks:
            try:
                callback()
            except Exception:
                _log.exception("broker %d: cleaning up after a closed connection failed",
                               self.broker.broker_id)
        self.broker.connection_closed(self, reason)


class _Listener:
    def __init__(self, broker: "Broker", sock: socket.socket) -> None:
        self.broker = broker
        self.sock = sock
        self.closed = False

    def on_readable(self) -> None:
        for _ in range(16):
            try:
                conn, peer = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                _log.warning("broker %d: accept failed: %s", self.broker.broker_id, exc)
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    # The connection stays queued and the socket readable: listening on
                    # at once would spin the loop. Try again a little later.
                    self._pause(_ACCEPT_RETRY_S)
                return
            self.broker.accepted(conn, peer)

    def _pause(self, seconds: float) -> None:
        self.broker.loop.unregister(self.sock)
        self.broker.loop.call_later(seconds, self._resume)

    def _resume(self) -> None:
        if not self.closed:
            self.broker.loop.register(self.sock, 1, self)

    def close(self) -> None:
        self.closed = True
        self.broker.loop.unregister(self.sock)
        self.sock.close()


class Broker:
    """A broker: a loopback listener and the replicas of the partitions it hosts."""

    def __init__(self, server: "ClusterServer", broker_id: int, port: int,
                 advertised_port: Optional[int] = None, rack: Optional[str] = None) -> None:
        self.server = server
        self.broker_id = broker_id
        #: Kafka's ``broker.rack``: given to clients in Metadata answers and matched
        #: against a consumer's rack by the replica selector (KIP-392).
        self.rack = rack
        self.host = LOOPBACK
        self.port = port
        #: The port given to clients in Metadata and FindCoordinator answers when it is
        #: not the listener's (a TLS terminator in front of the broker).
        self.advertised_port = advertised_port
        self.loop: Loop = server.loop
        self.settings = server.settings
        #: ``legacy.api.versions.enable``: the versions Kafka 4 removed are served too
        self.legacy_versions: bool = self.settings["legacy.api.versions.enable"]
        self.served_versions = supported_versions(self.legacy_versions)
        self.directory = os.path.join(server.data_dir, f"broker-{broker_id}")
        os.makedirs(self.directory, exist_ok=True)
        self.up = False
        self.connections: Set[ClientConnection] = set()
        self.replicas: Dict[Tuple[str, int], Replica] = {}
        self.fetchers = ReplicaFetcherManager(self)
        self._listener: Optional[_Listener] = None
        self._watchers: Dict[Tuple[str, int], Set[Callable[[], None]]] = {}
        self._dirty: Set[Callable[[], None]] = set()
        self._dirty_scheduled = False
        #: The periodic timers, by job (each re-armed when it fires).
        self._timers: Dict[str, Any] = {}
        self.fetch_via_sendfile = True
        #: KIP-227 incremental fetch sessions: the broker's, whatever the connection.
        self.fetch_sessions = FetchSessionCache(
            self.settings["max.incremental.fetch.session.cache.slots"],
            self.settings["min.incremental.fetch.session.eviction.ms"])

    @property
    def controller(self):
        return self.server.controller

    @property
    def client_port(self) -> int:
        """The port clients are told to connect to."""
        return self.advertised_port or self.port

    # -- life cycle ------------------------------------------------------------------
    def bind(self) -> None:
        """Open the listening socket (on the same port after a restart)."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        sock.listen(128)
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        self._listener = _Listener(self, sock)
        self.loop.register(sock, 1, self._listener)

    def start(self) -> None:
        """Open the logs of every partition this broker hosts and serve."""
        if self.up:
            return
        if self._listener is None:
            self.bind()
        self.up = True
        starts = self._read_offsets(LOG_START_OFFSET_CHECKPOINT)
        hws = self._read_offsets(REPLICATION_OFFSET_CHECKPOINT)
        for info in self.controller.topics.values():
            for part in info.partitions:
                if self.broker_id in part.replicas:
                    replica = self._open_replica(info, part, starts.get(part.key, 0))
                    replica.log.high_watermark = min(hws.get(part.key, 0),
                                                     replica.log.end_offset)
        self._timers = {
            "isr": self.loop.call_later(0.1, self._check_isr),
            "retention": self.loop.call_later(
                self.settings["log.retention.check.interval.ms"] / 1000, self._retention_pass),
            "cleaner": self.loop.call_later(self.settings["log.cleaner.backoff.ms"] / 1000,
                                            self._cleaner_pass),
        }
        if self.settings["connections.max.idle.ms"] >= 0:
            self._timers["idle"] = self.loop.call_later(self._idle_check_interval(),
                                                        self._close_idle_connections)
        self.controller.broker_started(self.broker_id)

    def stop(self) -> None:
        """Go down: stop listening, drop every connection, close the logs."""
        if not self.up:
            return
        self.up = False
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        for timer in self._timers.values():
            timer.cancel()
        self._timers = {}
        for conn in list(self.connections):
            conn.close("broker stopped")
        self.fetchers.stop_all()
        self.write_checkpoints()
        for replica in self.replicas.values():
            replica.close()
        self.replicas.clear()
        self._watchers.clear()
        self.fetch_sessions.clear()   # kept in memory only, as Kafka's
        self.server.share_fetch.broker_stopped(self.broker_id)
        self.controller.broker_stopped(self.broker_id)
        self.server.groups.coordinator_moved()

    def cut_connections(self) -> int:
        conns = list(self.connections)
        for conn in conns:
            conn.close("connections cut")
        return len(conns)

    def _read_offsets(self, name: str) -> Dict[Tuple[str, int], int]:
        data = read_file(os.path.join(self.directory, name))
        if data is None:
            return {}
        return {(e.topic, e.partition): e.offset for e in decode_offsets_checkpoint(data)}

    def write_checkpoints(self) -> None:
        replace_file(os.path.join(self.directory, REPLICATION_OFFSET_CHECKPOINT),
                     encode_offsets_checkpoint(
                         PartitionOffset(t, p, r.log.high_watermark)
                         for (t, p), r in self.replicas.items()))
        self.log_start_changed()

    def log_start_changed(self) -> None:
        replace_file(os.path.join(self.directory, LOG_START_OFFSET_CHECKPOINT),
                     encode_offsets_checkpoint(
                         PartitionOffset(t, p, r.log.log_start_offset)
                         for (t, p), r in self.replicas.items()))

    def log_dir(self, topic: str, partition: int) -> str:
        return os.path.join(self.directory, f"{topic}-{partition}")

    def _open_replica(self, info: TopicInfo, part: PartitionInfo,
                      log_start: int = 0) -> Replica:
        log = PartitionLog(self.log_dir(part.topic, part.index), part.topic, part.index,
                           info.settings, log_start)
        replica = Replica(self, info, part, log)
        self.replicas[part.key] = replica
        return replica

    # -- metadata events -------------------------------------------------------------
    def on_topic_created(self, info: TopicInfo) -> None:
        if not self.up:
            return
        for part in info.partitions:
            if self.broker_id in part.replicas and part.key not in self.replicas:
                self._open_replica(info, part).apply(part)

    def on_topic_deleted(self, info: TopicInfo) -> None:
        for part in info.partitions:
            replica = self.replicas.pop(part.key, None)
            self.fetchers.remove_partition(part.key)
            if replica is not None:
                replica.close()
                replica.log.delete()
            else:
                shutil.rmtree(self.log_dir(part.topic, part.index), ignore_errors=True)
            self.notify_data(part.key)
        if self.up:
            self.log_start_changed()

    def on_topic_config_changed(self, info: TopicInfo) -> None:
        for part in info.partitions:
            replica = self.replicas.get(part.key)
            if replica is not None:
                replica.topic = info
                replica.log.settings = info.settings

    def on_partition_changed(self, part: PartitionInfo) -> None:
        if not self.up:
            return
        replica = self.replicas.get(part.key)
        if replica is None:
            info = self.controller.topics.get(part.topic)
            if info is None:
                return
            replica = self._open_replica(info, part)
        replica.apply(part)

    # -- watchers (delayed fetches) --------------------------------------------------
    def watch(self, keys: List[Tuple[str, int]], callback: Callable[[], None]) -> None:
        for key in keys:
            self._watchers.setdefault(key, set()).add(callback)

    def unwatch(self, keys: List[Tuple[str, int]], callback: Callable[[], None]) -> None:
        for key in keys:
            watchers = self._watchers.get(key)
            if watchers is not None:
                watchers.discard(callback)
                if not watchers:
                    del self._watchers[key]

    def notify_data(self, key: Tuple[str, int]) -> None:
        """New data, a new high watermark or a new leader for ``key``: wake the fetches
        waiting on it (once per loop turn, however many notifications)."""
        watchers = self._watchers.get(key)
        if not watchers:
            return
        self._dirty.update(watchers)
        if not self._dirty_scheduled:
            self._dirty_scheduled = True
            self.loop.call_soon(self._run_dirty)

    def _run_dirty(self) -> None:
        self._dirty_scheduled = False
        dirty, self._dirty = self._dirty, set()
        for callback in dirty:
            try:
                callback()
            except Exception:
                _log.exception("broker %d: delayed request failed", self.broker_id)

    # -- periodic work ---------------------------------------------------------------
    def _idle_check_interval(self) -> float:
        return min(max(self.settings["connections.max.idle.ms"] / 4000, 0.01), 1.0)

    def _close_idle_connections(self) -> None:
        """Kafka's connections.max.idle.ms: a connection with no byte in or out for that
        long is closed, whatever it was doing (a client that sent half a request and
        went silent holds nothing for ever)."""
        if not self.up:
            return
        idle_s = self.settings["connections.max.idle.ms"] / 1000
        now = time.monotonic()
        for conn in list(self.connections):
            if now - conn.last_active > idle_s:
                self.server.request_log.add_event(
                    self.broker_id, "closed",
                    f"idle for more than connections.max.idle.ms ({idle_s:g} s)")
                conn.close("idle")
        self._timers["idle"] = self.loop.call_later(self._idle_check_interval(),
                                                    self._close_idle_connections)

    def _check_isr(self) -> None:
        if not self.up:
            return
        for replica in list(self.replicas.values()):
            replica.check_isr_lag()
        interval = min(self.settings["replica.lag.time.max.ms"] / 2000, 1.0)
        self._timers["isr"] = self.loop.call_later(interval, self._check_isr)

    def _retention_pass(self) -> None:
        if not self.up:
            return
        self.apply_retention()
        self._timers["retention"] = self.loop.call_later(
            self.settings["log.retention.check.interval.ms"] / 1000, self._retention_pass)

    def apply_retention(self) -> int:
        deleted = 0
        for replica in list(self.replicas.values()):
            log = replica.log
            before = log.log_start_offset
            deleted += log.apply_retention()
            if log.log_start_offset != before:
                self.notify_data(replica.key)
        if deleted:
            self.log_start_changed()
        return deleted

    def _cleaner_pass(self) -> None:
        if not self.up:
            return
        if self.settings["log.cleaner.enable"]:
            self.run_cleaner()
        self._timers["cleaner"] = self.loop.call_later(
            self.settings["log.cleaner.backoff.ms"] / 1000, self._cleaner_pass)

    def run_cleaner(self, force: bool = False) -> int:
        removed = 0
        for replica in list(self.replicas.values()):
            removed += replica.log.compact(force=force)
        return removed

    # -- connections -----------------------------------------------------------------
    def accepted(self, sock: socket.socket, peer: Tuple[str, int]) -> None:
        if not self.up:
            sock.close()
            return
        self.connections.add(ClientConnection(self, sock, peer))

    def connection_closed(self, conn: ClientConnection, reason: str) -> None:
        self.connections.discard(conn)
        _log.debug("broker %d: connection from %s closed: %s", self.broker_id, conn.peer, reason)

    # -- the request pipeline --------------------------------------------------------
    def _refuse(self, conn: ClientConnection, reason: str, head: Any = None) -> None:
        """Close the connection, as Kafka does for a request it cannot parse."""
        self.server.request_log.add_event(self.broker_id, "closed", reason,
                                          api_key=getattr(head, "api_key", None))
        _log.info("broker %d: closing connection from %s: %s", self.broker_id, conn.peer, reason)
        conn.close(reason)

    def handle_frame(self, conn: ClientConnection, frame: memoryview) -> None:
        if conn.sasl is not None and conn.sasl.raw_tokens:
            _sasl.on_raw_token(self, conn, frame)   # after SaslHandshake v0: bare tokens
            return
        try:
            api_key, api_version, correlation_id = peek_request(frame)
        except KafkaProtocolError as exc:
            self._refuse(conn, f"malformed request header: {exc}")
            return
        supported = self.served_versions.get(api_key)
        if supported is None or api_key not in HANDLERS:
            self._refuse(conn, f"unknown or unsupported API key {api_key}")
            return
        if not supported[0] <= api_version <= supported[1]:
            if api_key == ApiKey.API_VERSIONS:
                # KIP-511: answer in v0 with the error and our ranges.
                self._answer_unsupported_api_versions(conn, api_version, correlation_id)
                return
            self._refuse(conn, f"{api_info(api_key).name} v{api_version} is not supported "
                               f"(versions {supported[0]}-{supported[1]})")
            return
        request: Any  # the request class of api_key
        try:
            head, body = decode_request_header(frame)
            request, used = request_class(api_key).decode_prefix(body, api_version)
        except (KafkaProtocolError, UnsupportedVersionError, ValueError) as exc:
            self._refuse(conn, f"malformed {api_info(api_key).name} v{api_version} "
                               f"request: {exc}", None)
            return
        validator = VALIDATORS.get(api_key)
        refusal = validator(request, api_version) if validator is not None else None
        if refusal is not None:
            self._refuse(conn, f"invalid {api_info(api_key).name} v{api_version} request: "
                               f"{refusal}", head)
            return
        entry = None
        if not _is_replica_fetch(api_key, request):
            entry = self.server.request_log.add(self.broker_id, head, conn.principal)
            # the request's size on the wire (its frame, without the size prefix): a
            # client's requests that grow with its history show here
            entry["request_bytes"] = len(frame)
        ctx = RequestContext(self, conn, head, request, entry)
        if used < len(body):
            ctx.note(trailing_bytes_ignored=len(body) - used)
        if api_key not in _SASL_EXEMPT:
            if not conn.authenticated:
                self._refuse(conn, f"{api_info(api_key).name} before SASL authentication")
                return
            if conn.session_expires is not None and time.monotonic() > conn.session_expires:
                self._refuse(conn, SESSION_EXPIRED, head)
                return
        injected = self.server.faults.take_error(self.broker_id, api_key)
        if api_key == ApiKey.PRODUCE:
            ctx.note(partitions=produce_summary(request))
        if injected is not None:
            code, executed = injected
            ctx.note(injected_error=code, injected_after_execution=executed)
            if not executed:
                if code == ErrorCode.SHARE_SESSION_NOT_FOUND and api_key in SHARE_SESSION_APIS:
                    # The answer says the session is gone: make it so, as it would be
                    # on Kafka (the member's records of it go back to the group).
                    self.server.share_fetch.end_session(self, request.group_id,
                                                        request.member_id)
                ctx.respond(ERROR_ANSWERS[api_key](request, api_version, code))
                return
            ctx.replace_error = code
        try:
            HANDLERS[api_key](ctx)
        except Exception as exc:
            _log.error("broker %d: %s v%d failed:\n%s", self.broker_id,
                       api_info(api_key).name, api_version, traceback.format_exc())
            ctx.note(handler_error=f"{type(exc).__name__}: {exc}")
            if ctx.answered:
                return
            answer = ERROR_ANSWERS.get(api_key)
            if answer is None:
                self._refuse(conn, f"internal error serving {api_info(api_key).name}")
                return
            ctx.respond(answer(request, api_version, ErrorCode.UNKNOWN_SERVER_ERROR))

    def _answer_unsupported_api_versions(self, conn: ClientConnection, version: int,
                                         correlation_id: int) -> None:
        resp = ApiVersionsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION,
                                   api_keys=served_api_versions(self.legacy_versions))
        self.server.request_log.add_event(self.broker_id, "unsupported_version",
                                          f"ApiVersions v{version}", api_key=ApiKey.API_VERSIONS)
        # KIP-511: the body in v0, under the header every ApiVersions version has (v0).
        conn.send([encode_response(resp.encode(0), version, correlation_id,
                                   api_key=ApiKey.API_VERSIONS)])
        conn.finished()

    def send_response(self, ctx: RequestContext, response: Any,
                      regions: Optional[List[Any]]) -> None:
        version = ctx.version
        fit_to_version(response, version)
        if ctx.log_entry is not None:
            codes = error_codes(response)
            ctx.log_entry["error_codes"] = sorted(codes)
            ctx.log_entry["errors"] = sorted(ErrorCode(c).name if c in ErrorCode._value2member_map_
                                             else str(c) for c in codes)
            ctx.log_entry["answered"] = time.time()
        if regions:
            body = response.encode_parts(version, min_size=1)
            parts: List[Any] = [b""]
            size = 0
            pending = iter(regions)
            for part in body:
                if PLACEHOLDER.owns(part):
                    region = next(pending)
                    size += region.size
                    if self.fetch_via_sendfile:
                        parts.append(region)
                    else:
                        parts.append(os.pread(region.file.fileno(), region.size, region.position))
                else:
                    parts.append(part)
                    size += len(part)
            parts[0] = encode_response_header(ctx.api_key, version, ctx.head.correlation_id,
                                              size)
            frame = parts
        else:
            frame = [encode_response(response, version, ctx.head.correlation_id)]
        delay = self.server.faults.latency(self.broker_id, ctx.api_key)
        if delay > 0:
            self.loop.call_later(delay, self._deliver, ctx.conn, frame)
        else:
            self._deliver(ctx.conn, frame)

    @staticmethod
    def _deliver(conn: ClientConnection, frame: List[Any]) -> None:
        if conn.closed:
            return
        conn.send(frame)
        conn.finished()

    def finish_without_response(self, ctx: RequestContext) -> None:
        ctx.conn.finished()

    # -- helpers for handlers --------------------------------------------------------
    def leader_replica(self, topic: str, partition: int) -> Tuple[int, Optional[Replica]]:
        """``(error, replica)`` for a request that needs this broker to lead."""
        if self.controller.partition(topic, partition) is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
        replica = self.replicas.get((topic, partition))
        if replica is None or not replica.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, replica
        return ErrorCode.NONE, replica

    def local_replica(self, topic: str, partition: int) -> Tuple[int, Optional[Replica]]:
        """``(error, replica)`` for a request any replica may serve (a consumer's Fetch
        v11+, KIP-392): NOT_LEADER_OR_FOLLOWER where this broker holds none."""
        if self.controller.partition(topic, partition) is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
        replica = self.replicas.get((topic, partition))
        if replica is None:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, None
        return ErrorCode.NONE, replica

    def region(self, result: Any) -> FileRegion:
        return FileRegion(result.file, result.position, result.size)


def _is_replica_fetch(api_key: int, request: Any) -> bool:
    if api_key != ApiKey.FETCH:
        return False
    replica_id = request.replica_id
    state = getattr(request, "replica_state", None)
    if state is not None and state.replica_id >= 0:
        replica_id = state.replica_id
    return replica_id >= 0
