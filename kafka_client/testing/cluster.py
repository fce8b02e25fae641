"""The test process's handle on a cluster: :class:`Cluster` starts the cluster process,
talks to it over its control channel, and stops it."""
from __future__ import annotations

import atexit
import itertools
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import (
    Any,
    BinaryIO,
    Callable,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Union,
)

from kafka_proto.enums import CoordinatorType
from kafka_proto.errors import ErrorCode
from kafka_proto.logdir import LOG_SUFFIX
from kafka_proto.messages import API_KEYS, API_KEYS_BY_NAME, ApiKey

__all__ = [
    "Cluster",
    "ClusterError",
    "BrokerAddress",
    "PartitionState",
    "ReplicaLogState",
    "TopicState",
    "RequestLogEntry",
    "COORDINATOR_GROUP",
    "COORDINATOR_TRANSACTION",
]

#: FindCoordinator key types.
COORDINATOR_GROUP = CoordinatorType.GROUP
COORDINATOR_TRANSACTION = CoordinatorType.TRANSACTION

_PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent.parent)
_LIVE: "weakref.WeakSet[Cluster]" = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for cluster in list(_LIVE):
        try:
            cluster.stop()
        except Exception:
            pass


#: How long start() waits for the cluster process to say it is up (s): a guard against a
#: process that never answers, long enough for a loaded 2-core machine (3 brokers took
#: over 30 s to start at nice 10 among CPU hogs).
START_TIMEOUT_S = 120.0


class ClusterError(RuntimeError):
    """A control operation the cluster refused. ``code`` is the Kafka error name (e.g.
    ``"UNKNOWN_TOPIC_OR_PARTITION"``) when there is one."""

    def __init__(self, message: str, code: Optional[str] = None) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class BrokerAddress:
    id: int
    host: str
    port: int
    up: bool
    #: ``broker.rack`` (None: no rack)
    rack: Optional[str] = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class ReplicaLogState:
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    segments: List[int]          # base offsets, oldest first
    directory: str


@dataclass(frozen=True)
class PartitionState:
    partition: int
    leader: int
    leader_epoch: int
    replicas: List[int]
    isr: List[int]
    high_watermark: int
    #: broker id -> its replica's log (brokers that are down are missing)
    replica_logs: Dict[int, ReplicaLogState]


@dataclass(frozen=True)
class TopicState:
    name: str
    topic_id: str
    config: Dict[str, Any]
    partitions: List[PartitionState]


@dataclass(frozen=True)
class RequestLogEntry:
    """One request a broker served (``kind == "request"``) or an event (``"closed"``,
    ``"bad_frame"``, ``"unsupported_version"``, ``"authenticated"``). ``details`` holds
    what the handler noted: for Produce, ``details["partitions"]`` lists per partition
    the topic, partition, producer id and epoch, base sequence, record count, error and
    offset; for a Fetch, ``details["partitions"]`` lists the partitions of the answer
    (an incremental answer's only; per partition topic, partition, fetch_offset, error,
    replica, high_watermark, bytes, preferred_read_replica), ``details["bytes"]`` the
    record bytes sent, and ``details["fetch_session"]`` the KIP-227 session:
    ``{"kind": "sessionless" | "full" | "incremental", "id": request session id,
    "epoch": request session epoch, "response_id": answer's session id (None while
    waiting), "requested": [[topic, partition, fetch_offset], ...] (named in the request,
    topic None for an unknown topic id), "forgotten": [[topic, partition], ...]}``; for
    events, ``details["detail"]`` says what happened (a closed connection's reason).
    Every request's ``details["request_bytes"]`` is its size on the wire (the frame
    after the size prefix); a Metadata request's ``details["requested_topics"]`` the
    number of topics it names (None: every topic); with the authorizer, a request's
    ``details["denied"]`` lists the checks that failed (``"WRITE TOPIC:orders"``)."""

    seq: int
    kind: str
    time: float
    broker: int
    api: Optional[str] = None
    api_key: Optional[int] = None
    version: Optional[int] = None
    correlation_id: Optional[int] = None
    client_id: Optional[str] = None
    errors: List[str] = field(default_factory=list)
    injected_error: Optional[str] = None
    details: Dict[str, Any] = field(default_factory=dict)

    _FIELDS = ("seq", "kind", "time", "broker", "api", "api_key", "version",
               "correlation_id", "client_id", "errors")

    @classmethod
    def from_dict(cls, raw: Dict[str, Any]) -> "RequestLogEntry":
        known: Dict[str, Any] = {k: raw.get(k) for k in cls._FIELDS if k in raw}
        injected = raw.get("injected_error")
        if injected is not None:
            injected = ErrorCode(injected).name
        details = {k: v for k, v in raw.items()
                   if k not in cls._FIELDS and k not in ("injected_error", "error_codes")}
        return cls(injected_error=injected, details=details, **known)


#: The kinds of request log entries: requests and the events the brokers record.
LOG_KINDS = frozenset(("request", "closed", "bad_frame", "unsupported_version",
                       "authenticated", "telemetry"))


def _api_name(api: Union[int, str]) -> Union[int, str]:
    if isinstance(api, ApiKey):
        return int(api)
    if isinstance(api, str) and api not in API_KEYS_BY_NAME:
        try:     # an ApiKey member's name ("PRODUCE", "produce")
            return API_KEYS[ApiKey[api.upper()]].name
        except KeyError:
            # A misspelt name would match nothing: a filter that finds nothing proves
            # nothing.
            raise ClusterError(f"unknown API {api!r}: give Kafka's name (\"Produce\", "
                               "\"Fetch\", ...) or an ApiKey") from None
    return api


def _check_ports(ports: Optional[Sequence[int]], brokers: int, what: str) -> List[int]:
    ports = list(ports or [])
    if len(ports) > brokers:
        raise ValueError(f"{what}: {len(ports)} given for {brokers} brokers (at most one "
                         "per broker)")
    for port in ports:
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ValueError(f"{what}: {port!r} is not a port (0-65535)")
    return ports


def _error_name(error: Union[int, str, ErrorCode]) -> str:
    if isinstance(error, str):
        return error
    return ErrorCode(error).name


class Cluster:
    """A multi-broker Kafka cluster for tests, in a background process.

    ::

        with Cluster(brokers=3) as cluster:
            cluster.create_topic("t", partitions=3, replication_factor=3)
            producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
            ...
            cluster.move_leader("t", 0)
            cluster.stop_broker(2)

    ``broker_config`` takes Kafka broker property names (``auto.create.topics.enable``,
    ``log.segment.bytes``, ``min.insync.replicas``, ``sasl.enabled.mechanisms``,
    ``connections.max.reauth.ms``, ...); ``users`` maps SASL user names to passwords
    (PLAIN and SCRAM; more with :meth:`set_sasl_credentials`). ``ports`` are the
    listeners' ports (default: free ones); ``advertised_ports`` the ports given to
    clients in Metadata answers, when something (a TLS terminator) sits in front of the
    listeners. ``racks`` gives each broker its ``broker.rack`` (one per broker, None for
    none), which Metadata answers carry and the replica selector matches against a
    consumer's ``client.rack`` (``broker_config={"replica.selector.class": "rack"}``,
    KIP-392). ``data_dir`` keeps the brokers' logs (default: a temporary directory
    removed by :meth:`stop`). The cluster process exits when this object stops or the
    test process dies.

    ``authorizer=True`` enforces ACLs as Kafka's StandardAuthorizer with
    ``allow.everyone.if.no.acl.found=false`` does (a request no ACL allows is refused);
    the principal of a connection is ``User:<SASL user>``, or ``User:ANONYMOUS`` without
    SASL, and ``super_users`` (principals, e.g. ``("User:admin",)``) pass every check.
    The ACLs are created and deleted with the ACL APIs (an AdminClient's
    ``create_acls``), or :meth:`create_acl` (no principal's rights needed); :meth:`acls`
    lists them. Without it the ACL APIs answer
    SECURITY_DISABLED, as a Kafka broker without an authorizer.
    """

    def __init__(self, brokers: int = 3, *, data_dir: Optional[str] = None,
                 broker_config: Optional[Mapping[str, Any]] = None,
                 users: Optional[Mapping[str, str]] = None,
                 ports: Optional[Sequence[int]] = None,
                 advertised_ports: Optional[Sequence[int]] = None,
                 racks: Optional[Sequence[Optional[str]]] = None,
                 log_level: str = "WARNING", start: bool = True,
                 start_timeout: float = START_TIMEOUT_S, authorizer: bool = False,
                 super_users: Iterable[str] = ()) -> None:
        if isinstance(brokers, bool) or not isinstance(brokers, int) or brokers < 1:
            raise ValueError(f"brokers must be a whole number, at least 1 (got {brokers!r})")
        if racks is not None and len(racks) != brokers:
            raise ValueError(f"racks: {len(racks)} given for {brokers} brokers (one per "
                             "broker, None for a broker without a rack)")
        ports = _check_ports(ports, brokers, "ports")
        advertised_ports = _check_ports(advertised_ports, brokers, "advertised_ports")
        super_users = [super_users] if isinstance(super_users, str) else list(super_users)
        for user in super_users:
            if not isinstance(user, str) or ":" not in user:
                raise ValueError(f"super_users: {user!r} is not a principal (\"User:NAME\")")
        if not isinstance(logging.getLevelName(str(log_level).upper()), int):
            raise ValueError(f"log_level: {log_level!r} is not a logging level (DEBUG, "
                             "INFO, WARNING, ERROR, CRITICAL)")
        self.broker_count = brokers
        self._own_dir = data_dir is None
        self.data_dir = os.path.abspath(data_dir or tempfile.mkdtemp(prefix="kafka-test-cluster-"))
        os.makedirs(self.data_dir, exist_ok=True)
        self.log_path = os.path.join(self.data_dir, "cluster.log")
        self._config = {
            "brokers": brokers,
            "data_dir": self.data_dir,
            "broker_config": dict(broker_config or {}),
            "users": dict(users or {}),
            "ports": ports,
            "advertised_ports": advertised_ports,
            "racks": list(racks) if racks is not None else None,
            "log_level": str(log_level).upper(),
            "log_file": self.log_path,
            "authorizer": bool(authorizer),
            "super_users": super_users,
        }
        self._process: Optional[subprocess.Popen] = None
        self._attached = False
        self._sock: Optional[socket.socket] = None
        self._reader: Optional[BinaryIO] = None
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._info: Dict[str, Any] = {}
        if start:
            self.start(start_timeout)

    @classmethod
    def attach(cls, control_address: str, timeout: float = 10.0) -> "Cluster":
        """A handle on a cluster run by ``python -m kafka_client.testing --control-port``
        elsewhere. :meth:`stop` only closes this handle; the cluster keeps running."""
        host, _, port = control_address.rpartition(":")
        if not port.isdigit() or not 0 < int(port) <= 65535:
            raise ValueError(f"control address {control_address!r}: expected HOST:PORT, as "
                             "python -m kafka_client.testing --control-port prints it")
        self = cls.__new__(cls)
        self._own_dir = False
        self._process = None
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        try:
            self._sock = socket.create_connection((host or "127.0.0.1", int(port)),
                                                  timeout=timeout)
        except OSError as exc:
            raise ClusterError(f"no cluster control channel at {control_address}: {exc}"
                               ) from None
        self._reader = self._sock.makefile("rb")
        self._attached = True
        self._info = self._call("info")
        self.data_dir = self._info["data_dir"]
        self.log_path = ""
        self.broker_count = len(self._info["brokers"])
        return self

    # -- life cycle ------------------------------------------------------------------
    def start(self, timeout: float = START_TIMEOUT_S) -> "Cluster":
        if self._process is not None or self._attached:
            return self
        # Started again after stop(): the temporary directory went with the first run.
        os.makedirs(self.data_dir, exist_ok=True)
        parent, child = socket.socketpair()
        env = dict(os.environ)
        env["PYTHONPATH"] = _PACKAGE_ROOT + os.pathsep + env.get("PYTHONPATH", "")
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "kafka_client.testing._server",
                 "--control-fd", str(child.fileno()), "--config", json.dumps(self._config)],
                pass_fds=(child.fileno(),), env=env, stdin=subprocess.DEVNULL)
        finally:
            child.close()
        self._sock = parent
        self._reader = parent.makefile("rb")
        parent.settimeout(timeout)
        try:
            first = self._read_reply()
        except (OSError, ValueError, ClusterError) as exc:
            self._failed_start()
            raise ClusterError(f"the cluster process did not start: {exc}") from None
        if not first.get("ok"):
            self._failed_start()
            raise ClusterError(f"the cluster did not start: {first.get('error')}")
        parent.settimeout(None)
        self._info = first["result"]
        _LIVE.add(self)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every broker and the cluster process; remove a temporary data dir."""
        if self._attached:
            self._close_channel()
            return
        if self._process is None:
            return
        try:
            self._call("shutdown", timeout=timeout)
        except Exception:
            pass
        try:
            self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            self._kill()
        self._close_channel()
        self._process = None
        _LIVE.discard(self)
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def _failed_start(self) -> None:
        self._kill()
        self._process = None
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def _kill(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait(5)
        self._close_channel()

    def _close_channel(self) -> None:
        for closable in (self._reader, self._sock):
            if closable is not None:
                try:
                    closable.close()
                except OSError:
                    pass
        self._reader = self._sock = None

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        if self._attached:
            return self._sock is not None
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> Optional[int]:
        return None if self._process is None else self._process.pid

    # -- control channel -------------------------------------------------------------
    def _read_reply(self) -> Dict[str, Any]:
        reader = self._reader
        if reader is None:  # closed by a stop() in another thread
            raise ClusterError("the cluster is not running")
        line = reader.readline()
        if not line:
            raise ClusterError(f"the cluster process ended; see {self.log_path}")
        return json.loads(line)

    def _call(self, op: str, timeout: Optional[float] = 60.0, **args: Any) -> Any:
        with self._lock:
            # stop() in another thread closes the channel outside this lock: the socket
            # taken once, a closed one raises OSError below, never None.
            sock = self._sock
            if sock is None:
                raise ClusterError("the cluster is not running")
            request_id = next(self._ids)
            try:
                sock.settimeout(timeout)
                sock.sendall(json.dumps({"id": request_id, "op": op,
                                         "args": args}).encode() + b"\n")
                reply = self._read_reply()
                sock.settimeout(None)
            except (OSError, ClusterError) as exc:
                # The process died, or left this call unanswered (its late answer would
                # be taken for the next call's): the channel is of no more use.
                self._close_channel()
                if isinstance(exc, ClusterError):
                    raise
                raise ClusterError(f"{op}: the cluster process does not answer "
                                   f"({type(exc).__name__}: {exc}); see {self.log_path}"
                                   ) from None
        if reply.get("id") != request_id:
            raise ClusterError(f"control channel out of step: {reply}")
        if not reply.get("ok"):
            raise ClusterError(reply.get("error", "failed"), reply.get("code"))
        return reply.get("result")

    # -- addresses -------------------------------------------------------------------
    @property
    def brokers(self) -> List[BrokerAddress]:
        info = self._call("info")
        return [BrokerAddress(b["id"], b["host"], b["port"], b["up"], b.get("rack"))
                for b in info["brokers"]]

    @property
    def broker_ids(self) -> List[int]:
        return [b["id"] for b in self._info["brokers"]]

    @property
    def bootstrap_servers(self) -> str:
        """Every broker's ``host:port``, comma separated (for ``bootstrap.servers``)."""
        return ",".join(f"{b['host']}:{b['port']}" for b in self._info["brokers"])

    def rack(self, broker: int) -> Optional[str]:
        """The broker's ``broker.rack`` (None: none)."""
        for b in self._info["brokers"]:
            if b["id"] == broker:
                return b.get("rack")
        raise ClusterError(f"no broker {broker}")

    def address(self, broker: int) -> str:
        for b in self._info["brokers"]:
            if b["id"] == broker:
                return f"{b['host']}:{b['port']}"
        raise ClusterError(f"no broker {broker}")

    @property
    def cluster_id(self) -> str:
        return self._info["cluster_id"]

    # -- topics ----------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int = 1,
                     replication_factor: Optional[int] = None,
                     config: Optional[Mapping[str, Any]] = None,
                     assignments: Optional[Sequence[Sequence[int]]] = None) -> TopicState:
        """Create a topic (replication factor: ``default.replication.factor``, at most
        the number of brokers); ``assignments`` lists each partition's replicas."""
        raw = self._call("create_topic", name=name, partitions=partitions,
                         replication_factor=replication_factor, config=dict(config or {}),
                         assignments=[list(a) for a in assignments] if assignments else None)
        return _topic_state(raw)

    def delete_topic(self, name: str) -> None:
        self._call("delete_topic", name=name)

    def create_partitions(self, name: str, total: int,
                          assignments: Optional[Sequence[Sequence[int]]] = None) -> TopicState:
        """Grow the topic to ``total`` partitions (the new ones' replicas placed
        round-robin, or as ``assignments`` says), as CreatePartitions does."""
        raw = self._call("create_partitions", name=name, total=total,
                         assignments=[list(a) for a in assignments] if assignments else None)
        return _topic_state(raw)

    def alter_topic_config(self, name: str, config: Mapping[str, Any]) -> None:
        """Replace the topic's property overrides."""
        self._call("alter_topic_config", name=name, config=dict(config))

    def topics(self) -> List[str]:
        return self._call("topics")

    def describe_topic(self, name: str) -> TopicState:
        return _topic_state(self._call("describe_topic", name=name))

    def partition(self, topic: str, partition: int) -> PartitionState:
        partitions = self.describe_topic(topic).partitions
        if not 0 <= partition < len(partitions):
            raise ClusterError(f"no partition {topic}-{partition} ({topic!r} has "
                               f"{len(partitions)})", "UNKNOWN_TOPIC_OR_PARTITION")
        return partitions[partition]

    def leader(self, topic: str, partition: int) -> int:
        return self.partition(topic, partition).leader

    def wait_in_sync(self, topic: str, timeout: float = 10.0) -> TopicState:
        """Wait until every replica of every partition is in the ISR and the leader's
        high watermark is its log end (so every replica has everything)."""
        return self.wait_for(lambda: _all_in_sync(self.describe_topic(topic)), timeout,
                             f"{topic} in sync")

    def wait_for(self, predicate: Callable[[], Any], timeout: float = 10.0,
                 what: str = "condition") -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
            time.sleep(0.02)

    # -- faults ----------------------------------------------------------------------
    def move_leader(self, topic: str, partition: int, to: Optional[int] = None) -> int:
        """Make another in-sync replica (``to``, or the next one) the leader; returns it."""
        return self._call("move_leader", topic=topic, partition=partition, to=to)

    def stop_broker(self, broker: int) -> None:
        """Take a broker down: its listener closes, connections drop, it leaves every
        ISR and its leaderships move (its logs stay on disk)."""
        self._call("stop_broker", broker=broker)

    def start_broker(self, broker: int) -> None:
        """Bring a stopped broker back on the same port; it reloads its logs from disk,
        catches up from the leaders and rejoins the ISRs."""
        self._call("start_broker", broker=broker)

    def restart_broker(self, broker: int) -> None:
        self.stop_broker(broker)
        self.start_broker(broker)

    def inject_errors(self, api: Union[int, str], errors: Iterable[Union[int, str]],
                      broker: Optional[int] = None, executed: bool = False) -> None:
        """The next answers of ``api`` (name like ``"Produce"`` or an ApiKey) carry
        these errors, one answer per error, in order; on ``broker`` or any broker.

        By default the requests are refused, not executed. With ``executed=True`` they
        are executed and only the answers replaced: a Produce is written (and
        replicated) but its acknowledgement is an error, as when an answer is lost."""
        if isinstance(errors, (str, int)):
            errors = [errors]     # one error, not the letters of its name
        self._call("inject_errors", api=_api_name(api),
                   errors=[_error_name(e) for e in errors], broker=broker,
                   executed=executed)

    def pending_errors(self) -> List[Dict[str, Any]]:
        return self._call("pending_errors")

    def set_latency(self, seconds: float, broker: Optional[int] = None,
                    apis: Optional[Iterable[Union[int, str]]] = None) -> None:
        """Delay every answer of ``broker`` (or of all brokers) by ``seconds`` (0 ends
        it), optionally only those of some APIs."""
        self._call("set_latency", seconds=seconds, broker=broker,
                   apis=[_api_name(a) for a in apis] if apis else None)

    def cut_connections(self, broker: Optional[int] = None) -> int:
        """Close every client connection of ``broker`` (or of all brokers)."""
        return self._call("cut_connections", broker=broker)

    def evict_fetch_sessions(self, broker: Optional[int] = None) -> int:
        """Drop the incremental fetch sessions (KIP-227) of ``broker`` (or of every
        broker), as a broker evicting them would: the next incremental Fetch of each gets
        FETCH_SESSION_ID_NOT_FOUND. Returns how many were dropped."""
        return self._call("evict_fetch_sessions", broker=broker)

    def fetch_sessions(self, broker: int) -> List[Dict[str, Any]]:
        """The incremental fetch sessions ``broker`` holds, oldest first: ``{"id",
        "epoch"`` (the epoch its next request must carry), ``"topic_ids"`` (made by a
        Fetch v13+), ``"partitions"``: ``[[topic, partition, fetch_offset], ...]`` in the
        order they are read (the topic None for an unknown topic id)``}``."""
        return self._call("fetch_sessions", broker=broker)

    def share_state(self, group: str) -> List[Dict[str, Any]]:
        """The share-partitions of share group ``group`` (KIP-932), by topic and partition:
        ``{"topic", "partition", "start_offset"`` (None until the group's first ShareFetch
        of it), ``"end_offset"`` (after the last record fetched), ``"records"``: the
        in-flight ones, ``[[offset, state, delivery_count, owner_member_id], ...]``, the
        state ``"available"``, ``"acquired"``, ``"acknowledged"`` or ``"archived"`` ``}``."""
        return self._call("share_state", group=group)

    def set_group_config(self, group: str, config: Dict[str, Any]) -> None:
        """Set group configs of share group ``group`` (whether it exists yet or not), as
        IncrementalAlterConfigs on a GROUP resource would: ``share.auto.offset.reset``
        (``"latest"``, Kafka's default, or ``"earliest"``),
        ``share.record.lock.duration.ms``, ``share.heartbeat.interval.ms``,
        ``share.session.timeout.ms``, ``share.delivery.count.limit``; a value None
        goes back to the default (the broker's ``group.share.*`` property)."""
        self._call("set_group_config", group=group, config=dict(config))

    def clear_faults(self) -> None:
        """Forget injected errors and latencies."""
        self._call("clear_faults")

    def coordinator(self, group: Optional[str] = None,
                    transactional_id: Optional[str] = None) -> int:
        key_type, key = _coordinator_key(group, transactional_id)
        return self._call("coordinator", key_type=key_type, key=key)

    def move_coordinator(self, to: int, group: Optional[str] = None,
                         transactional_id: Optional[str] = None) -> None:
        """Make broker ``to`` the coordinator of a group or transactional id; the old
        one answers NOT_COORDINATOR from now on."""
        key_type, key = _coordinator_key(group, transactional_id)
        self._call("move_coordinator", key_type=key_type, key=key, to=to)

    # -- observation -----------------------------------------------------------------
    def request_log(self, since: int = 0, api: Optional[Union[int, str]] = None,
                    kind: Optional[str] = "request") -> List[RequestLogEntry]:
        """Requests served (and events) from sequence number ``since`` on."""
        if kind is not None and kind not in LOG_KINDS:
            raise ValueError(f"kind: {kind!r} is none of {sorted(LOG_KINDS)} (None: all)")
        if api is not None:
            api = _api_name(api)
        entries = [RequestLogEntry.from_dict(e) for e in self._call("request_log", since=since)]
        if kind is not None:
            entries = [e for e in entries if e.kind == kind]
        if api is not None:
            if isinstance(api, str):
                entries = [e for e in entries if e.api == api]
            else:
                entries = [e for e in entries if e.api_key == int(api)]
        return entries

    def clear_request_log(self) -> int:
        """Drop the log; returns the sequence number the next entry gets."""
        return self._call("clear_request_log")

    def sasl_authentications(self, since: int = 0) -> List[RequestLogEntry]:
        """The successful SASL authentications from sequence number ``since`` on
        (re-authentications included), oldest first: ``details`` has the ``mechanism``,
        the ``principal``, ``reauthentication``, the ``session_lifetime_ms`` given and the
        OAUTHBEARER ``extensions`` received."""
        return self.request_log(since, kind="authenticated")

    # -- client telemetry (KIP-714) ---------------------------------------------------
    def set_telemetry_subscription(self, metrics: Iterable[str] = ("",), *,
                                   push_interval_ms: int = 300_000,
                                   compression_types: Optional[Iterable[int]] = None,
                                   max_bytes: int = 1024 * 1024,
                                   delta_temporality: bool = True) -> int:
        """Subscribe every client to the metrics whose names start with one of
        ``metrics`` (``[""]``: all of them; ``[]``: none, the state at start), pushed
        every ``push_interval_ms``, compressed with one of ``compression_types``
        (codec ids; default zstd, lz4, gzip, snappy), at most ``max_bytes`` each, sums
        as deltas or cumulative. Returns the new subscription id: clients holding the
        old one get UNKNOWN_SUBSCRIPTION_ID at their next push."""
        return self._call("set_telemetry_subscription", metrics=list(metrics),
                          push_interval_ms=push_interval_ms,
                          compression_types=None if compression_types is None
                          else list(compression_types),
                          max_bytes=max_bytes, delta_temporality=delta_temporality)

    def telemetry_pushes(self, since: int = 0) -> List[RequestLogEntry]:
        """The PushTelemetry requests received from sequence number ``since`` on,
        oldest first, each with the ``client_id`` of the request; ``details`` has
        ``client_instance_id``, ``subscription_id``,
        ``terminating``, ``compression_type``, ``payload_bytes``, ``error`` (the error
        name answered, or None) and, for a push accepted, the decoded ``resource``
        attributes, ``scope`` and ``metrics`` (name -> kind, monotonic, temporality,
        unit and points, each with value, attributes, start_time_unix_nano and
        time_unix_nano)."""
        return self.request_log(since, kind="telemetry")

    # -- SASL users ------------------------------------------------------------------
    def set_sasl_credentials(self, user: str, password: str) -> None:
        """Add a SASL user or change its password (PLAIN, and SCRAM credentials for every
        enabled SCRAM mechanism); new authentications see it at once."""
        self._call("set_sasl_credentials", user=user, password=password)

    def delete_sasl_credentials(self, user: str) -> bool:
        """Forget a SASL user (its connections stay authenticated until their session
        ends); False if there was no such user."""
        return self._call("delete_sasl_credentials", user=user)

    # -- ACLs ------------------------------------------------------------------------
    def create_acl(self, resource_type: str, name: str, principal: str, operation: str,
                   permission: str = "ALLOW", pattern_type: str = "LITERAL",
                   host: str = "*") -> None:
        """Store an ACL as CreateAcls would, by Kafka's names (``"TOPIC"``,
        ``"GROUP"``, ``"CLUSTER"`` named ``"kafka-cluster"``, ``"TRANSACTIONAL_ID"``, ...;
        ``"READ"``, ``"WRITE"``, ``"ALL"``, ...; ``"LITERAL"`` or ``"PREFIXED"``):
        ClusterError with code INVALID_REQUEST for a binding Kafka refuses."""
        self._call("create_acl", resource_type=resource_type, name=name,
                   pattern_type=pattern_type, principal=principal, host=host,
                   operation=operation, permission=permission)

    def acls(self) -> List[Dict[str, str]]:
        """Every ACL stored, oldest first: ``resource_type``, ``name``, ``pattern_type``,
        ``principal``, ``host``, ``operation``, ``permission`` (Kafka's names)."""
        return self._call("acls")

    # -- storage ---------------------------------------------------------------------
    def roll_segments(self, topic: str, partition: Optional[int] = None) -> None:
        """Start a new active segment in every replica of the topic (or partition)."""
        self._call("roll", topic=topic, partition=partition)

    def run_retention(self) -> int:
        """Apply retention on every live broker now; returns segments deleted."""
        return self._call("run_retention")

    def run_cleaner(self) -> int:
        """One compaction pass on every live broker now; returns records removed."""
        return self._call("run_cleaner", force=True)

    def set_fetch_mode(self, sendfile: bool) -> None:
        """Serve Fetch records with os.sendfile (default) or with read + send."""
        self._call("set_fetch_mode", sendfile=sendfile)

    def stats(self) -> Dict[str, int]:
        """Counters of the cluster process: ``sendfile_bytes`` / ``sendfile_calls`` (record
        bytes sent from segment files with os.sendfile) and ``send_bytes`` (everything
        else written to sockets: headers, other responses, read+send fetches)."""
        return self._call("stats")

    def log_dir(self, topic: str, partition: int, broker: int) -> str:
        return os.path.join(self.data_dir, f"broker-{broker}", f"{topic}-{partition}")

    def segment_files(self, topic: str, partition: int, broker: int) -> List[str]:
        directory = self.log_dir(topic, partition, broker)
        return sorted(os.path.join(directory, n) for n in os.listdir(directory)
                      if n.endswith(LOG_SUFFIX))


def _coordinator_key(group: Optional[str], transactional_id: Optional[str]) -> tuple:
    if (group is None) == (transactional_id is None):
        raise ValueError("give exactly one of group and transactional_id")
    if group is not None:
        return COORDINATOR_GROUP, group
    return COORDINATOR_TRANSACTION, transactional_id


def _topic_state(raw: Dict[str, Any]) -> TopicState:
    parts = []
    for p in raw["partitions"]:
        logs = {int(b): ReplicaLogState(**v) for b, v in p["replica_logs"].items()}
        parts.append(PartitionState(p["partition"], p["leader"], p["leader_epoch"],
                                    p["replicas"], p["isr"], p["high_watermark"], logs))
    return TopicState(raw["name"], raw["topic_id"], raw["config"], parts)


def _all_in_sync(state: TopicState) -> Optional[TopicState]:
    for p in state.partitions:
        if p.leader < 0 or sorted(p.isr) != sorted(p.replicas):
            return None
        leader_log = p.replica_logs.get(p.leader)
        if leader_log is None or leader_log.high_watermark != leader_log.log_end_offset:
            return None
        if any(r.log_end_offset != leader_log.log_end_offset for r in p.replica_logs.values()):
            return None
    return state
