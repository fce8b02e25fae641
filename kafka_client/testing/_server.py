"""The cluster process: every broker on one event loop, and the control channel.

Started by :class:`kafka_client.testing.Cluster` as
``python -m kafka_client.testing._server --control-fd N --config JSON`` with one end of
a socket pair as its control channel (the process exits when that channel closes, so it
never outlives its test), or in the foreground by ``python -m kafka_client.testing``,
which may open the control channel on a loopback port instead.

The control channel carries one JSON object per line each way: ``{"id", "op", "args"}``
in, ``{"id", "ok", "result"}`` or ``{"id", "ok": false, "error", "code"}`` out. Every
operation runs on the loop between two requests, so it sees and changes a consistent
cluster.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import signal
import socket
import sys
import uuid
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from kafka_proto.enums import (
    AclOperation, AclPatternType, AclPermissionType, AclResourceType, CoordinatorType,
)
from kafka_proto.errors import ErrorCode
from kafka_proto.messages import API_KEYS_BY_NAME, ApiKey

from ._acls import Acl, AclError, Authorizer
from ._api import ERROR_ANSWERS
from ._broker import Broker
from ._config import BrokerSettings, ConfigError, resolve_broker_config
from ._consumer_groups import ConsumerGroupCoordinator
from ._controller import Controller, ControllerError
from ._faults import Faults, RequestLog
from ._groups import GroupCoordinator
from ._sasl import Credentials
from ._share_fetch import ShareFetchState
from ._share_groups import ShareGroupCoordinator
from ._telemetry import TelemetrySubscription
from ._txn import TransactionCoordinator
from ._net import Loop

__all__ = ["ClusterServer", "ControlError", "main", "serve_control_port"]

_log = logging.getLogger("kafka_client.testing")


class ControlError(Exception):
    """A control operation refused; ``code`` is a Kafka error name when there is one."""

    def __init__(self, message: str, code: Optional[str] = None) -> None:
        super().__init__(message)
        self.code = code


class ClusterServer:
    """Brokers, controller, coordinators and faults of one test cluster."""

    def __init__(self, brokers: int, data_dir: str,
                 broker_config: Optional[Dict[str, Any]] = None,
                 ports: Optional[List[int]] = None,
                 users: Optional[Dict[str, str]] = None,
                 cluster_id: Optional[str] = None,
                 advertised_ports: Optional[List[int]] = None,
                 racks: Optional[List[Optional[str]]] = None,
                 authorizer: bool = False, super_users: Optional[List[str]] = None) -> None:
        if brokers < 1:
            raise ValueError("a cluster needs at least one broker")
        racks = list(racks or [])
        if racks and len(racks) != brokers:
            raise ValueError(f"racks: {len(racks)} given for {brokers} brokers (one per "
                             "broker, None for a broker without a rack)")
        if any(r is not None and (not isinstance(r, str) or not r) for r in racks):
            raise ValueError("racks: each rack is a non-empty string or None")
        for what, given in (("ports", ports), ("advertised ports", advertised_ports)):
            if given and len(given) > brokers:
                raise ValueError(f"{what}: {len(given)} given for {brokers} brokers (at most "
                                 "one per broker)")
        _raise_open_files_limit()
        self.loop = Loop()
        self.data_dir = os.path.abspath(data_dir)
        os.makedirs(self.data_dir, exist_ok=True)
        self.broker_overrides = dict(broker_config or {})
        self.settings = BrokerSettings(resolve_broker_config(self.broker_overrides))
        self.cluster_id = cluster_id or uuid.uuid4().hex[:22]
        self.sasl_required = bool(self.settings.sasl_mechanisms)
        #: Local addresses of the followers' fetch connections (inter-broker traffic).
        self.internal_peers: Set[Tuple[str, int]] = set()
        self.faults = Faults()
        self.request_log = RequestLog()
        self.controller = Controller(self)
        for user in super_users or ():
            if not isinstance(user, str) or ":" not in user:
                raise ValueError(f"super_users: {user!r} is not a principal (\"User:NAME\")")
        #: Kafka's StandardAuthorizer over the controller's ACLs (off: everything passes).
        self.authorizer = Authorizer(
            self.controller.acls, bool(authorizer), super_users or (),
            allow_everyone=self.settings["allow.everyone.if.no.acl.found"])
        ports = list(ports or [])
        advertised = list(advertised_ports or [])
        self.brokers: Dict[int, Broker] = {}
        for i in range(brokers):
            broker_id = i + 1
            port = ports[i] if i < len(ports) else 0
            self.brokers[broker_id] = Broker(self, broker_id, port,
                                             advertised[i] if i < len(advertised) else None,
                                             racks[i] if racks else None)
        #: SASL users: passwords and SCRAM credentials.
        self.credentials = Credentials(users or {}, self.settings.sasl_mechanisms)
        self.groups = GroupCoordinator(self)
        self.consumer_groups = ConsumerGroupCoordinator(self)
        self.share_groups = ShareGroupCoordinator(self)
        self.share_fetch = ShareFetchState(self)
        self.transactions = TransactionCoordinator(self)
        self.telemetry = TelemetrySubscription(self)
        self.next_producer_id = 1000

    def coordinator_moved(self, key_type: int, key: str) -> None:
        if key_type == CoordinatorType.GROUP:
            self.groups.coordinator_moved(key)

    def topics_changed(self) -> None:
        """Topics were created or deleted, or got partitions (the controller says so)."""
        self.consumer_groups.metadata_changed()
        self.share_groups.metadata_changed()
        self.share_fetch.forget(topic_ids=set(self.controller.topics_by_id))

    def allocate_producer_id(self) -> int:
        pid = self.next_producer_id
        self.next_producer_id += 1
        return pid

    # -- life cycle ------------------------------------------------------------------
    def start(self) -> None:
        for broker in self.brokers.values():
            broker.bind()
        for broker in self.brokers.values():
            broker.start()

    def shutdown(self) -> None:
        for broker in self.brokers.values():
            broker.stop()
        self.loop.stop()

    def info(self) -> Dict[str, Any]:
        return {
            "cluster_id": self.cluster_id,
            "data_dir": self.data_dir,
            "pid": os.getpid(),
            "brokers": [{"id": b.broker_id, "host": b.host, "port": b.port,
                         "advertised_port": b.advertised_port, "up": b.up, "rack": b.rack}
                        for b in self.brokers.values()],
        }


def _raise_open_files_limit() -> None:
    """Every replica keeps its segment files open: let the process open as many files as
    its hard limit allows."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass   # RLIM_INFINITY above the kernel's nr_open: keep the soft limit


# --------------------------------------------------------------------------- control


def _api_key(api: Any) -> int:
    if isinstance(api, int):
        return api
    name = str(api)
    if name in API_KEYS_BY_NAME:
        return API_KEYS_BY_NAME[name]
    try:
        return ApiKey[name.upper()]
    except KeyError:
        raise ControlError(f"unknown API {api!r}") from None


def _error_code(error: Any) -> int:
    if isinstance(error, int):
        return error
    try:
        return ErrorCode[str(error).upper()]
    except KeyError:
        raise ControlError(f"unknown error code {error!r}") from None


class ControlOps:
    """The operations of the control channel, ``op_<name>(**args)``."""

    def __init__(self, server: ClusterServer) -> None:
        self.server = server

    def _broker(self, broker_id: Any):
        broker = self.server.brokers.get(int(broker_id))
        if broker is None:
            raise ControlError(f"no broker {broker_id}")
        return broker

    def _partition(self, topic: str, partition: int):
        part = self.server.controller.partition(topic, partition)
        if part is None:
            raise ControlError(f"no partition {topic}-{partition}", "UNKNOWN_TOPIC_OR_PARTITION")
        return part

    def op_info(self) -> Dict[str, Any]:
        return self.server.info()

    def op_create_topic(self, name: str, partitions: int = 1,
                        replication_factor: Optional[int] = None,
                        config: Optional[Dict[str, Any]] = None,
                        assignments: Optional[List[List[int]]] = None) -> Dict[str, Any]:
        rf = -1 if replication_factor is None else replication_factor
        assigned = {i: a for i, a in enumerate(assignments)} if assignments else None
        info = self.server.controller.create_topic(
            name, -1 if assigned else partitions, -1 if assigned else rf, assigned, config)
        return self.op_describe_topic(info.name)

    def op_delete_topic(self, name: str) -> None:
        self.server.controller.delete_topic(name)

    def op_create_partitions(self, name: str, total: int,
                             assignments: Optional[List[List[int]]] = None) -> Dict[str, Any]:
        self.server.controller.create_partitions(name, total, assignments)
        return self.op_describe_topic(name)

    def op_alter_topic_config(self, name: str, config: Dict[str, Any]) -> None:
        self.server.controller.alter_topic_config(name, config)

    def op_describe_topic(self, name: str) -> Dict[str, Any]:
        info = self.server.controller.topics.get(name)
        if info is None:
            raise ControlError(f"no topic {name!r}", "UNKNOWN_TOPIC_OR_PARTITION")
        parts = []
        for part in info.partitions:
            replicas = {}
            for r in part.replicas:
                broker = self.server.brokers[r]
                replica = broker.replicas.get(part.key)
                if replica is not None:
                    log = replica.log
                    replicas[str(r)] = {"log_start_offset": log.log_start_offset,
                                        "log_end_offset": log.end_offset,
                                        "high_watermark": log.high_watermark,
                                        "segments": [s.base_offset for s in log.segments],
                                        "directory": log.directory}
            parts.append({"partition": part.index, "leader": part.leader,
                          "leader_epoch": part.leader_epoch, "replicas": part.replicas,
                          "isr": part.isr, "high_watermark": part.high_watermark,
                          "replica_logs": replicas})
        return {"name": info.name, "topic_id": str(info.topic_id), "config": info.values,
                "partitions": parts}

    def op_topics(self) -> List[str]:
        return sorted(self.server.controller.topics)

    def op_move_leader(self, topic: str, partition: int, to: Optional[int] = None) -> int:
        self._partition(topic, partition)
        return self.server.controller.move_leader(topic, partition, to)

    def op_stop_broker(self, broker: int) -> None:
        self._broker(broker).stop()

    def op_start_broker(self, broker: int) -> None:
        self._broker(broker).start()

    def op_inject_errors(self, api: Any, errors: List[Any], broker: Optional[int] = None,
                         executed: bool = False) -> None:
        key = _api_key(api)
        if key not in ERROR_ANSWERS:
            raise ControlError(f"errors cannot be injected into {api!r} answers")
        if broker is not None:
            self._broker(broker)
        self.server.faults.push_errors(broker, key, [_error_code(e) for e in errors],
                                       bool(executed))

    def op_pending_errors(self) -> List[Dict[str, Any]]:
        return self.server.faults.pending_errors()

    def op_set_latency(self, seconds: float, broker: Optional[int] = None,
                       apis: Optional[List[Any]] = None) -> None:
        if broker is not None:
            self._broker(broker)
        keys = [_api_key(a) for a in apis] if apis else None
        self.server.faults.set_latency(broker, float(seconds), keys)

    def op_cut_connections(self, broker: Optional[int] = None) -> int:
        brokers = [self._broker(broker)] if broker is not None else self.server.brokers.values()
        return sum(b.cut_connections() for b in brokers)

    def op_evict_fetch_sessions(self, broker: Optional[int] = None) -> int:
        brokers = [self._broker(broker)] if broker is not None else self.server.brokers.values()
        return sum(b.fetch_sessions.clear() for b in brokers)

    def op_fetch_sessions(self, broker: int) -> List[Dict[str, Any]]:
        by_id = self.server.controller.topics_by_id

        def topic_name(p: Any) -> Optional[str]:
            if p.topic:
                return p.topic
            info = by_id.get(p.topic_id)
            return info.name if info is not None else None

        return self._broker(broker).fetch_sessions.describe(topic_name)

    def op_share_state(self, group: str) -> List[Dict[str, Any]]:
        return self.server.share_fetch.describe(group)

    def op_set_group_config(self, group: str, config: Dict[str, Any]) -> None:
        try:
            for name, value in config.items():
                self.server.share_groups.set_config(group, name, value)
        except ValueError as exc:
            raise ControlError(str(exc)) from None

    def op_clear_faults(self) -> None:
        self.server.faults.clear()

    def op_request_log(self, since: int = 0) -> List[Dict[str, Any]]:
        return self.server.request_log.since(since)

    def op_clear_request_log(self) -> int:
        return self.server.request_log.clear()

    def op_roll(self, topic: str, partition: Optional[int] = None) -> None:
        info = self.server.controller.topics.get(topic)
        if info is None:
            raise ControlError(f"no topic {topic!r}", "UNKNOWN_TOPIC_OR_PARTITION")
        for broker in self.server.brokers.values():
            for (t, p), replica in broker.replicas.items():
                if t == topic and (partition is None or p == partition):
                    replica.log.roll()

    def op_run_retention(self) -> int:
        return sum(b.apply_retention() for b in self.server.brokers.values() if b.up)

    def op_run_cleaner(self, force: bool = True) -> int:
        return sum(b.run_cleaner(force) for b in self.server.brokers.values() if b.up)

    def op_set_fetch_mode(self, sendfile: bool) -> None:
        for broker in self.server.brokers.values():
            broker.fetch_via_sendfile = bool(sendfile)

    def op_move_coordinator(self, key_type: int, key: str, to: int) -> None:
        self._broker(to)
        self.server.controller.coordinator_overrides[(int(key_type), key)] = int(to)
        self.server.coordinator_moved(int(key_type), key)

    def op_set_sasl_credentials(self, user: str, password: str) -> None:
        self.server.credentials.set(str(user), str(password))

    def op_delete_sasl_credentials(self, user: str) -> bool:
        return self.server.credentials.delete(str(user))

    def op_set_telemetry_subscription(self, metrics: List[str], push_interval_ms: int,
                                      compression_types: Optional[List[int]],
                                      max_bytes: int, delta_temporality: bool) -> int:
        try:
            return self.server.telemetry.configure(
                [str(m) for m in metrics], int(push_interval_ms),
                None if compression_types is None else [int(c) for c in compression_types],
                int(max_bytes), bool(delta_temporality))
        except ValueError as exc:
            raise ControlError(str(exc)) from None

    def op_create_acl(self, resource_type: str, name: str, pattern_type: str, principal: str,
                      host: str, operation: str, permission: str) -> None:
        try:
            acl = Acl(AclResourceType[resource_type.upper()], name,
                      AclPatternType[pattern_type.upper()], principal, host,
                      AclOperation[operation.upper()], AclPermissionType[permission.upper()])
        except KeyError as exc:
            raise ControlError(f"unknown ACL value {exc}") from None
        try:
            self.server.controller.acls.create(acl)
        except AclError as exc:
            raise ControlError(exc.message, ErrorCode(exc.code).name) from None

    def op_acls(self) -> List[Dict[str, Any]]:
        return [acl.as_dict() for acl in self.server.controller.acls]

    def op_stats(self) -> Dict[str, int]:
        return dict(self.server.loop.stats)

    def op_shutdown(self) -> None:
        # The answer goes out first: the loop ends after this turn.
        self.server.loop.call_soon(self.server.shutdown)

    def op_coordinator(self, key_type: int, key: str) -> int:
        return self.server.controller.coordinator(int(key_type), key)


class ControlConnection:
    """One control channel: JSON lines in, JSON lines out, on the cluster's loop."""

    def __init__(self, server: ClusterServer, sock: socket.socket,
                 on_close: Callable[[], None]) -> None:
        self.server = server
        self.sock = sock
        self.ops = ControlOps(server)
        self.closed = False
        self._buffer = b""
        self._on_close = on_close
        sock.setblocking(True)   # replies are small; the test process reads them at once
        server.loop.register(sock, 1, self)

    def on_readable(self) -> None:
        try:
            data = self.sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.close()
            return
        self._buffer += data
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            if line.strip():
                self._serve(line)

    def _serve(self, line: bytes) -> None:
        request: Dict[str, Any] = {}
        try:
            request = json.loads(line)
            op = getattr(self.ops, "op_" + str(request.get("op")), None)
            if op is None:
                raise ControlError(f"unknown control operation {request.get('op')!r}")
            result = op(**(request.get("args") or {}))
            reply = {"id": request.get("id"), "ok": True, "result": result}
        except ControllerError as exc:
            reply = {"id": request.get("id"), "ok": False, "error": exc.message,
                     "code": ErrorCode(exc.code).name}
        except (ControlError, ConfigError, TypeError, ValueError) as exc:
            reply = {"id": request.get("id"), "ok": False, "error": str(exc),
                     "code": getattr(exc, "code", None)}
        except Exception as exc:  # never take the cluster down for a bad control call
            _log.exception("control operation failed")
            reply = {"id": request.get("id"), "ok": False,
                     "error": f"{type(exc).__name__}: {exc}", "code": None}
        self.send(reply)

    def send(self, message: Dict[str, Any]) -> None:
        try:
            self.sock.sendall(json.dumps(message, default=str).encode() + b"\n")
        except OSError:
            self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.server.loop.unregister(self.sock)
        self.sock.close()
        self._on_close()


class _ControlListener:
    def __init__(self, server: ClusterServer, port: int) -> None:
        self.server = server
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(8)
        self.sock.setblocking(False)
        self.port = self.sock.getsockname()[1]
        server.loop.register(self.sock, 1, self)

    def on_readable(self) -> None:
        try:
            conn, _peer = self.sock.accept()
        except (BlockingIOError, InterruptedError):
            return
        ControlConnection(self.server, conn, lambda: None)

    def close(self) -> None:
        self.server.loop.unregister(self.sock)
        self.sock.close()


def serve_control_port(server: ClusterServer, port: int = 0) -> int:
    """Accept control connections on a loopback port; returns the port."""
    return _ControlListener(server, port).port


# --------------------------------------------------------------------------- entry point


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kafka_client.testing._server")
    parser.add_argument("--control-fd", type=int, required=True)
    parser.add_argument("--config", required=True, help="cluster settings as JSON")
    args = parser.parse_args(argv)
    config = json.loads(args.config)
    logging.basicConfig(
        level=getattr(logging, config.get("log_level", "WARNING")),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        filename=config.get("log_file"))
    control = socket.socket(fileno=args.control_fd)
    try:
        server = ClusterServer(config["brokers"], config["data_dir"],
                               config.get("broker_config"), config.get("ports"),
                               config.get("users"), config.get("cluster_id"),
                               config.get("advertised_ports"), config.get("racks"),
                               config.get("authorizer", False), config.get("super_users"))
        server.start()
    except Exception as exc:
        control.sendall(json.dumps({"id": 0, "ok": False,
                                    "error": f"{type(exc).__name__}: {exc}"}).encode() + b"\n")
        return 1
    signal.signal(signal.SIGTERM, lambda *_: server.shutdown())
    channel = ControlConnection(server, control, server.shutdown)
    channel.send({"id": 0, "ok": True, "result": server.info()})
    profile_path = os.environ.get("KAFKA_TESTING_PROFILE")
    if profile_path:
        # Development aid: profile the cluster process's loop into a pstats file.
        import cProfile
        import time

        profiler = cProfile.Profile(time.process_time)
        profiler.runctx("server.loop.run()", globals(), {"server": server})
        profiler.dump_stats(profile_path)
    else:
        server.loop.run()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
