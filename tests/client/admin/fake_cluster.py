"""A scripted cluster of fake brokers on loopback ports, for routing and retry tests.

Each node listens on its own port and speaks the protocol through kafka_proto's
generated classes: ApiVersions from its ``apis`` table, Metadata and FindCoordinator from
the cluster's state (brokers, controller, coordinator, topic leaders), and every other
API through a handler set by the test::

    cluster = FakeCluster(nodes=(1, 2), controller=2)
    cluster.handle(ApiKey.CREATE_TOPICS, lambda node, req, version: response)
    ... AdminClient({"bootstrap.servers": cluster.bootstrap}) ...
    assert [(n, k) for n, k, _v, _r in cluster.seen if k == ApiKey.CREATE_TOPICS] == ...

A handler returns the response object, :data:`CLOSE` to close the connection instead,
or :data:`SILENT` never to answer. ``seen`` lists every request but ApiVersions as
``(node, api_key, version, request)``.
"""
from __future__ import annotations

import selectors
import socket
import struct
import threading
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import pytest

from kafka_client.admin import AdminClient
from kafka_client.errors import KafkaException
from kafka_proto.framing import FrameParser
from kafka_proto.messages import (
    API_KEYS,
    ApiKey,
    ApiVersionsResponse,
    FindCoordinatorResponse,
    MetadataResponse,
    request_class,
    request_header_version,
    response_header_version,
)
from kafka_proto.errors import ErrorCode

CLOSE = object()
SILENT = object()

Handler = Callable[[int, Any, int], Any]


def _uvarint(buf: bytes, pos: int) -> Tuple[int, int]:
    shift = value = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def _decode_request(frame: bytes) -> Tuple[int, int, int, Any]:
    api_key, version, cid = struct.unpack_from(">hhi", frame)
    pos = 8
    (n,) = struct.unpack_from(">h", frame, pos)
    pos += 2 + max(n, 0)
    if request_header_version(api_key, version) >= 2:
        count, pos = _uvarint(frame, pos)
        for _ in range(count):
            _tag, pos = _uvarint(frame, pos)
            size, pos = _uvarint(frame, pos)
            pos += size
    body = frame[pos:]
    if api_key == ApiKey.API_VERSIONS:
        return api_key, version, cid, None  # may be a version the codec does not know
    return api_key, version, cid, request_class(api_key).decode(body, version)


class FakeCluster:
    def __init__(self, nodes: Iterable[int] = (1,), controller: Optional[int] = None,
                 apis: Optional[Dict[int, Tuple[int, int]]] = None,
                 missing: Iterable[int] = ()) -> None:
        # Every API but client telemetry (KIP-714) by default: a client asks for its
        # metrics subscription when a broker advertises it, which these fakes do not
        # answer unless a test gives a handler.
        self.apis = dict(apis) if apis is not None else {
            k: (info.min_version, info.max_version) for k, info in API_KEYS.items()
            if k not in (ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, ApiKey.PUSH_TELEMETRY)}
        for k in missing:
            self.apis.pop(k, None)
        self.servers: Dict[int, socket.socket] = {}
        self.ports: Dict[int, int] = {}
        for node in nodes:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            s.listen(16)
            s.setblocking(False)
            self.servers[node] = s
            self.ports[node] = s.getsockname()[1]
        self.controller = controller if controller is not None else min(self.ports)
        self.coordinator = min(self.ports)
        self.cluster_id = "fake-cluster"
        #: topic -> leader node per partition
        self.topics: Dict[str, List[int]] = {}
        self.handlers: Dict[int, Handler] = {}
        self.seen: List[Tuple[int, int, int, Any]] = []
        self.errors: List[BaseException] = []
        self._conns: Dict[socket.socket, Tuple[int, FrameParser]] = {}
        self._lock = threading.Lock()
        self._sel = selectors.DefaultSelector()
        for node, s in self.servers.items():
            self._sel.register(s, selectors.EVENT_READ, ("accept", node))
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="fake-cluster", daemon=True)
        self._thread.start()

    # -- test API ------------------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports.values())

    def handle(self, api_key: int, handler: Handler) -> None:
        self.handlers[api_key] = handler

    def requests(self, api_key: int) -> List[Tuple[int, Any]]:
        """``(node, request)`` of every request of ``api_key`` so far."""
        with self._lock:
            return [(n, r) for n, k, _v, r in self.seen if k == api_key]

    def close(self) -> None:
        self._stop = True
        self._thread.join(5)
        for s in list(self._conns) + list(self.servers.values()):
            s.close()
        self._sel.close()
        if self.errors:
            raise self.errors[0]

    def __enter__(self) -> "FakeCluster":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- default answers -----------------------------------------------------------------
    def metadata(self, node: int, req: Any, version: int) -> Any:
        names = list(self.topics) if req.topics is None else [t.name for t in req.topics]
        topics = []
        for name in names:
            leaders = self.topics.get(name)
            if leaders is None:
                topics.append(MetadataResponse.MetadataResponseTopic(
                    error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name, partitions=[]))
                continue
            topics.append(MetadataResponse.MetadataResponseTopic(
                error_code=0, name=name, partitions=[
                    MetadataResponse.MetadataResponsePartition(
                        error_code=0, partition_index=i, leader_id=leader,
                        replica_nodes=[leader], isr_nodes=[leader])
                    for i, leader in enumerate(leaders)]))
        return MetadataResponse(
            brokers=[MetadataResponse.MetadataResponseBroker(node_id=n, host="127.0.0.1",
                                                             port=p)
                     for n, p in self.ports.items()],
            cluster_id=self.cluster_id, controller_id=self.controller, topics=topics)

    def find_coordinator(self, node: int, req: Any, version: int) -> Any:
        c = self.coordinator
        if version >= 4:
            return FindCoordinatorResponse(coordinators=[FindCoordinatorResponse.Coordinator(
                key=k, node_id=c, host="127.0.0.1", port=self.ports[c], error_code=0)
                for k in req.coordinator_keys])
        return FindCoordinatorResponse(error_code=0, node_id=c, host="127.0.0.1",
                                       port=self.ports[c])

    # -- the loop ------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop:
            for key, _mask in self._sel.select(0.05):
                kind, node = key.data
                try:
                    if kind == "accept":
                        conn, _ = key.fileobj.accept()
                        conn.setblocking(True)
                        self._conns[conn] = (node, FrameParser())
                        self._sel.register(conn, selectors.EVENT_READ, ("conn", node))
                    else:
                        self._read(key.fileobj)
                except Exception as exc:  # surfaced by close()
                    self.errors.append(exc)

    def _drop(self, conn: socket.socket) -> None:
        self._sel.unregister(conn)
        self._conns.pop(conn, None)
        conn.close()

    def _read(self, conn: socket.socket) -> None:
        try:
            data = conn.recv(65536)
        except OSError:
            data = b""
        if not data:
            self._drop(conn)
            return
        node, parser = self._conns[conn]
        for frame in parser.feed(data):
            api_key, version, cid, req = _decode_request(bytes(frame))
            if api_key == ApiKey.API_VERSIONS:
                self._send(conn, api_key, version, cid, self._api_versions(version))
                continue
            with self._lock:
                self.seen.append((node, api_key, version, req))
            handler = self.handlers.get(api_key) or {
                ApiKey.METADATA: self.metadata,
                ApiKey.FIND_COORDINATOR: self.find_coordinator}.get(api_key)
            resp = CLOSE if handler is None else handler(node, req, version)
            if resp is CLOSE:
                self._drop(conn)
                return
            if resp is not SILENT:
                self._send(conn, api_key, version, cid, resp)

    def _api_versions(self, version: int) -> Any:
        return ApiVersionsResponse(error_code=0, api_keys=[
            ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
            for k, (lo, hi) in sorted(self.apis.items())])

    def _send(self, conn: socket.socket, api_key: int, version: int, cid: int,
              resp: Any) -> None:
        header = struct.pack(">i", cid)
        if response_header_version(api_key, version) >= 1:
            header += b"\x00"  # no tagged fields
        body = header + resp.encode(version if api_key != ApiKey.API_VERSIONS
                                    else min(version, ApiVersionsResponse.MAX_VERSION))
        conn.sendall(struct.pack(">i", len(body)) + body)


@pytest.fixture
def admins():
    """``make(cluster, **conf)``: an AdminClient on a FakeCluster with short retry
    backoffs; every one made is closed after the test."""
    made = []

    def make(cluster, **conf):
        a = AdminClient({"bootstrap.servers": cluster.bootstrap, "retry.backoff.ms": 10,
                         "retry.backoff.max.ms": 50, **conf})
        made.append(a)
        return a

    yield make
    for a in made:
        a.close()


def error_of(future, timeout=10):
    """The KafkaError a future fails with (it must fail within ``timeout`` seconds)."""
    with pytest.raises(KafkaException) as ei:
        future.result(timeout)
    return ei.value.args[0]
