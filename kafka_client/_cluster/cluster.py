"""The cluster as one client sees it: broker connections (sparse: opened only when a
broker is needed), bootstrap, and the metadata cache kept fresh.

Runs on the client's I/O thread (:class:`~kafka_client._net.io_thread.IOThread`); the
application thread only calls :meth:`Cluster.list_topics` (which waits on an event) and
:meth:`Cluster.want_topics` through ``io.call_soon``.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from kafka_client._cluster.metadata import ClusterMetadata, MetadataCache
from kafka_client._cluster.telemetry import Sample, Source, Telemetry, interval_samples
from kafka_client._interval import IntervalStat
from kafka_client._stats import empty_window, request_counts
from kafka_client._model import ThrottleEvent
from kafka_client._net.bootstrap import canonical_names
from kafka_client._net.connection import (
    AUTHENTICATING,
    CONNECTING,
    DISCONNECTED,
    HANDSHAKE,
    READY,
    TLS_HANDSHAKE,
    BrokerConnection,
    ConnectionSettings,
)
from kafka_client.errors import KafkaError, KafkaException, client_error
from kafka_proto.messages import ApiKey, MetadataRequest

__all__ = ["Cluster"]

_log = logging.getLogger("kafka_client.cluster")

#: A group coordinator's connection is keyed ``COORDINATOR_KEY_BASE - node_id`` in
#: :attr:`Cluster.conns`, apart from the broker's own (the Java client's
#: ``Integer.MAX_VALUE - id``): brokers answer the requests of one connection one at a
#: time, in order, so on a shared socket every heartbeat and commit would wait behind
#: the Fetch long-polling there (up to fetch.wait.max.ms).
COORDINATOR_KEY_BASE = 2**31 - 1
#: A consumer's Fetch requests to a broker go on two connections of their own (lanes),
#: keyed ``FETCH_LANE_KEY_BASE - node_id`` (lane 1) and ``FETCH_KEY_BASE - node_id``
#: (lane 0). Not on the broker's own: a Fetch waits at the broker for new data (up to
#: fetch.wait.max.ms), and the metadata, ListOffsets, FindCoordinator and
#: OffsetForLeaderEpoch requests sent behind it would wait as long. The second lane
#: carries what becomes fetchable (a partition seeked, assigned or emptied) while the
#: first holds such a Fetch.
FETCH_LANE_KEY_BASE = 2**30 - 1
FETCH_KEY_BASE = 2**29 - 1
#: lane -> (key base, purpose shown in the statistics' broker names)
_FETCH_LANES = {0: (FETCH_KEY_BASE, "fetch"), 1: (FETCH_LANE_KEY_BASE, "fetch2")}

#: errors, throttle events, callback failures: how many of each are kept unserved
_KEPT_MAX = 1000
#: How often a request waiting for a connection looks again when no connection comes up
#: (one becoming ready wakes it at once: see Cluster.retry_when_ready).
CONNECT_POLL_S = 0.02

#: connection set-up failures that another attempt within a call will not cure (wrong
#: credentials, a certificate refused, a broker too old for the SASL or ApiVersions
#: exchange the client speaks)
_SETUP_REFUSED = frozenset({KafkaError._AUTHENTICATION, KafkaError._SSL,
                            KafkaError._UNSUPPORTED_FEATURE})

#: connection states as librdkafka's statistics name them
_LIBRDKAFKA_STATE = {DISCONNECTED: "DOWN", CONNECTING: "CONNECT",
                     TLS_HANDSHAKE: "SSL_HANDSHAKE", HANDSHAKE: "APIVERSION_QUERY",
                     AUTHENTICATING: "AUTH_HANDSHAKE", READY: "UP"}


class Cluster:
    """Connections by node id, the bootstrap brokers (negative ids) and the metadata.

    ``on_metadata(changed_topics)`` listeners run on the I/O thread after every update;
    ``on_broker_state(conn, state, error)`` after every connection state change.
    """

    def __init__(self, config: Any, io: Any) -> None:
        self.config = config
        self.io = io
        self.settings = ConnectionSettings(config)
        self.settings.broker_identity = lambda conn: (Cluster.broker_name(conn),
                                                     Cluster.broker_id(conn))
        self.log = config.logger_for(_log.name)
        self.auto_create = bool(config["allow.auto.create.topics"])
        refresh = config["topic.metadata.refresh.interval.ms"]
        self.metadata = MetadataCache(
            max_age=config["metadata.max.age.ms"] / 1000.0,
            refresh_interval=refresh / 1000.0 if refresh > 0 else -1,
            fast_interval=config["topic.metadata.refresh.fast.interval.ms"] / 1000.0,
            fast_max=config["retry.backoff.max.ms"] / 1000.0,
            log=config.logger_for("kafka_client.metadata"),
            hidden=config.topic_hidden if config["topic.blacklist"] else None)
        self.conns: Dict[int, BrokerConnection] = {}
        #: (host, port, api key) said to be missing (report_missing_api)
        self._missing_apis: Set[Tuple[str, int, int]] = set()
        #: connections of their own to a broker, by what they are for (see
        #: COORDINATOR_KEY_BASE, FETCH_LANE_KEY_BASE): never used for anything else
        self._dedicated_conns: Dict[BrokerConnection, str] = {}
        self.bootstrap: List[BrokerConnection] = []
        for i, (host, port) in enumerate(self._bootstrap_addresses(config)):
            conn = self._new_conn(-1 - i, host, port)
            self.bootstrap.append(conn)
        self.on_metadata: List[Callable[[Set[str]], None]] = []
        self.on_broker_state: List[Callable[[BrokerConnection, str, Optional[KafkaError]],
                                            None]] = []
        self._rr = 0
        self._md_conn: Optional[BrokerConnection] = None
        #: requests waiting for a connection to come up (see retry_when_ready), by key
        self._ready_waiters: Dict[Any, Tuple[Any, Callable[[], None]]] = {}
        self.all_down_reported = False
        #: with every connection down: when the next attempt to keep one may start
        self._next_keep_connected = 0.0
        #: the last error that closed a connection, and when (monotonic): named by a
        #: blocking metadata call that times out while it happened
        self.last_connection_error: Optional[Tuple[float, KafkaError]] = None
        self.errors: List[KafkaError] = []  # client-level errors for error_cb (app thread)
        #: broker throttle reports for throttle_cb (app thread); kept only when one is set
        self.throttle_events: List[ThrottleEvent] = []
        self._wants_throttle_events = config["throttle_cb"] is not None
        #: the last throttle time any broker reported (ms), for librdkafka's rule: report
        #: every time > 0, and the first 0 after one (the throttling has ended)
        self._last_throttle_ms = 0
        self._errors_lock = threading.Lock()  # guards the three lists (see _keep)
        self.closed = False
        #: application calls waiting in wait_for(), and whether the client closed under
        #: them (guarded by _waits_lock)
        self._app_waits: Set[threading.Event] = set()
        self._waits_lock = threading.Lock()
        self.waits_abandoned = False
        #: exceptions the application's callbacks raised off the application thread
        #: (oauth_cb refreshing a token, the connection callbacks), for the caller of
        #: poll()/flush()/consume()
        self.callback_failures: List[Exception] = []
        #: set when one of these lists got an item (one attribute for the consumer's
        #: fast paths to test); cleared by the client that serves them
        self.events_waiting = False
        #: connections that became ready, ever (KIP-714's connection.creation.total)
        self.connections_made = 0
        self._connections_at_push = 0
        #: the client's metrics push (KIP-714), once the client starts it
        self.telemetry: Optional[Telemetry] = None
        self._overall_latency = False
        self.settings.callback_failed = self._callback_failed
        tokens = self.settings.security.tokens
        if tokens is not None:
            tokens.report_errors_to(self._token_refresh_failed)
        io.add_tick(self._tick)

    # -- connections -------------------------------------------------------------------
    @staticmethod
    def _bootstrap_addresses(config: Any) -> List[Tuple[str, int]]:
        """``bootstrap.servers``; each name replaced by its addresses' canonical names
        with client.dns.lookup=resolve_canonical_bootstrap_servers_only (KIP-235)."""
        addresses = config.broker_addresses()
        if config["client.dns.lookup"] != "resolve_canonical_bootstrap_servers_only":
            return addresses
        out: List[Tuple[str, int]] = []
        for host, port in addresses:
            for name in canonical_names(host, port, config["broker.address.family"],
                                        config["resolve_cb"]):
                if (name, port) not in out:
                    out.append((name, port))
        return out

    def _new_conn(self, node_id: int, host: str, port: int) -> BrokerConnection:
        conn = BrokerConnection(self.io, node_id, host, port, self.settings,
                                on_state=self._on_state)
        conn.on_throttle = self._on_throttle
        self.conns[node_id] = conn
        return conn

    def connection(self, node_id: int) -> Optional[BrokerConnection]:
        """The connection to a broker (created, not yet connected, if new); None if the
        broker is unknown."""
        conn = self.conns.get(node_id)
        info = self.metadata.brokers.get(node_id)
        if conn is not None:
            if info is not None:
                conn.readdress(info[0], info[1])   # the broker restarted elsewhere?
            return conn
        if info is None:
            return None
        host, port, _rack = info
        # Adopt a bootstrap connection to the same address instead of opening another.
        for b in self.bootstrap:
            if b.node_id < 0 and (b.host, b.port) == (host, port):
                del self.conns[b.node_id]
                b.node_id = node_id
                self.conns[node_id] = b
                return b
        return self._new_conn(node_id, host, port)

    def ensure_connected(self, node_id: int) -> Optional[BrokerConnection]:
        """The connection to ``node_id``, connecting it if down and past its backoff, or
        in a backoff from a failure that a Metadata answer listing the broker came after
        (it is back: see BrokerConnection.named_up)."""
        conn = self.connection(node_id)
        if conn is not None and conn.state == DISCONNECTED:
            self._connect(conn, node_id)
        return conn

    def _connect(self, conn: BrokerConnection, node_id: int) -> None:
        """Start connecting ``conn`` (to broker ``node_id``) if its backoff allows, or
        if a Metadata or FindCoordinator answer named the broker since it failed."""
        listed = self.metadata.listed_at.get(node_id)
        if listed is not None:
            conn.named_up(listed)
        conn.connect()

    def coordinator_connection(self, node_id: int) -> Optional[BrokerConnection]:
        """A connection of its own to broker ``node_id``, for group coordinator
        requests (see COORDINATOR_KEY_BASE), connecting it if down and past its
        backoff; None if the broker is unknown."""
        return self._dedicated_connection(node_id, COORDINATOR_KEY_BASE - node_id,
                                          "coordinator")

    def fetch_lane_connection(self, node_id: int, lane: int) -> Optional[BrokerConnection]:
        """A consumer's connection to broker ``node_id`` for Fetch requests, lane 0 or 1
        (see FETCH_LANE_KEY_BASE), connecting it if down and past its backoff; None if
        the broker is unknown."""
        base, purpose = _FETCH_LANES[lane]
        return self._dedicated_connection(node_id, base - node_id, purpose)

    def _dedicated_connection(self, node_id: int, key: int,
                              purpose: str) -> Optional[BrokerConnection]:
        info = self.metadata.brokers.get(node_id)
        if info is None:
            return None
        host, port, _rack = info
        conn = self.conns.get(key)
        if conn is not None and (conn.host, conn.port) != (host, port):
            # The broker moved: requests still queued for the old address fail.
            self._dedicated_conns.pop(conn, None)
            del self.conns[key]
            conn.on_state = None
            conn.close(None, fail_queued=True)
            conn = None
        if conn is None:
            conn = self._new_conn(key, host, port)
            self._dedicated_conns[conn] = purpose
        if conn.state == DISCONNECTED:
            self._connect(conn, node_id)
        return conn

    def shared_connections(self) -> List[BrokerConnection]:
        """The connections any request may use: not the dedicated ones (a coordinator's,
        the fetch lanes), where a JoinGroup or a Fetch may hold the line for seconds."""
        return [c for c in self.conns.values() if c not in self._dedicated_conns]

    def _ready_conn(self) -> Optional[BrokerConnection]:
        """The ready broker connection with the fewest requests in flight (never a
        dedicated one: a JoinGroup or a Fetch may hold it for seconds)."""
        best = None
        for conn in self.shared_connections():
            if conn.state == READY and (best is None or conn.in_flight < best.in_flight):
                best = conn
        return best

    def _kick_connect(self, now: float) -> None:
        """No connection is up: start one, rotating over known brokers and bootstrap."""
        candidates = self.shared_connections()
        if any(c.state not in (DISCONNECTED, READY) for c in candidates):
            return  # one is on its way
        for node_id in self.metadata.brokers:
            if node_id not in self.conns:
                c = self.connection(node_id)
                if c is not None and c not in candidates:
                    candidates.append(c)
        if not candidates:
            return
        for i in range(len(candidates)):
            conn = candidates[(self._rr + i) % len(candidates)]
            if conn.state == DISCONNECTED and now >= conn.next_attempt:
                self._rr = (self._rr + i + 1) % len(candidates)
                conn.connect(now)
                return

    def retry_when_ready(self, key: Any, delay: float, fn: Callable[[], None]) -> None:
        """I/O thread: ``fn()`` once, as soon as a broker connection becomes ready, or
        after ``delay`` seconds, whichever comes first (a request waiting for a connection:
        the timer is its fallback, for connections that never come up). Replaces what
        ``key`` had waiting; :meth:`cancel_retry` drops it."""
        self.cancel_retry(key)
        self._ready_waiters[key] = (self.io.call_later(delay, self._run_waiter, key), fn)

    def cancel_retry(self, key: Any) -> None:
        """I/O thread: forget what ``key`` had waiting (:meth:`retry_when_ready`)."""
        waiting = self._ready_waiters.pop(key, None)
        if waiting is not None:
            waiting[0].cancel()

    def _run_waiter(self, key: Any) -> None:
        waiting = self._ready_waiters.get(key)
        if waiting is not None:
            self.cancel_retry(key)
            waiting[1]()

    def _on_state(self, conn: BrokerConnection, state: str, error: Optional[KafkaError]) -> None:
        if state == READY:
            self.connections_made += 1
            self.all_down_reported = False
            # After the connection's own handling of the change: the waiters send on it.
            for key in list(self._ready_waiters):
                self.io.call_soon(self._run_waiter, key)
        elif error is not None:
            self.last_connection_error = (time.monotonic(), error)
            if self._md_conn is conn:
                self._md_conn = None
            # The broker's error first, then (when it was the last one up) all down, in
            # librdkafka's order.
            self.report_error(error if error.code() != KafkaError._TRANSPORT else KafkaError(
                KafkaError._TRANSPORT, error.str()))
            if not any(c.state == READY for c in self.conns.values()) \
                    and not self.all_down_reported and all(
                        c.connect_count > 0 and c.state == DISCONNECTED
                        for c in self.conns.values()):
                self.all_down_reported = True
                self.report_error(KafkaError(
                    KafkaError._ALL_BROKERS_DOWN,
                    f"{len(self.conns)}/{len(self.conns)} brokers are down "
                    f"(last: {error.str()})"))
        for cb in self.on_broker_state:
            cb(conn, state, error)

    def all_brokers_down(self) -> bool:
        """Any thread: every broker connection is down, each having been tried (what
        error_cb was told with _ALL_BROKERS_DOWN), and none has come up since."""
        return self.all_down_reported

    # -- application threads waiting for the I/O thread ------------------------------------
    def wait_for(self, event: threading.Event, deadline: float) -> bool:
        """Application thread: wait until ``event`` is set (True) or ``deadline``
        (monotonic) passes (False), in short slices so that Ctrl-C gets through. Raises
        KafkaException ``_DESTROY`` as soon as the client is closed meanwhile (by another
        thread: :meth:`abandon_waits`), whose I/O thread would never set it."""
        with self._waits_lock:
            self._app_waits.add(event)
        try:
            while True:
                if self.waits_abandoned:
                    raise KafkaException(KafkaError(
                        KafkaError._DESTROY, "the client was closed while this call waited"))
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return event.is_set()
                if event.wait(min(remaining, 0.2)) and not self.waits_abandoned:
                    return True
        finally:
            with self._waits_lock:
                self._app_waits.discard(event)

    def abandon_waits(self) -> None:
        """Any thread, as the client closes: every call waiting in :meth:`wait_for`
        (and any later one) raises ``_DESTROY`` now instead of at its timeout."""
        with self._waits_lock:
            self.waits_abandoned = True
            waiting = list(self._app_waits)
        for event in waiting:
            event.set()

    def set_sasl_credentials(self, username: str, password: str) -> None:
        """librdkafka's ``set_sasl_credentials``: PLAIN/SCRAM credentials for the next
        authentications (connections already authenticated keep theirs until they
        reconnect or re-authenticate). Any thread."""
        self.settings.security.set_credentials(username, password)

    # -- what the application thread serves (errors, throttle events, callback failures)
    def _keep(self, kind: str, item: Any) -> None:
        """Any thread: keep ``item`` in the list ``kind`` for the application thread (at
        most _KEPT_MAX each: a client nobody polls does not grow without bound)."""
        with self._errors_lock:
            kept = getattr(self, kind)
            if len(kept) < _KEPT_MAX:
                kept.append(item)
            self.events_waiting = True

    def _take(self, kind: str) -> List[Any]:
        with self._errors_lock:
            out = getattr(self, kind)
            setattr(self, kind, [])
        return out

    def report_error(self, error: KafkaError) -> None:
        self._keep("errors", error)

    def report_missing_api(self, conn: BrokerConnection, api: ApiKey) -> None:
        """I/O thread: ``conn``'s broker has no version of ``api`` this client speaks
        (not a Kafka broker, or a gateway that leaves it out): said once per broker
        address and API, through error_cb and the log, where the client would otherwise
        wait for it without a word."""
        key = (conn.host, conn.port, int(api))
        if key in self._missing_apis:
            return
        self._missing_apis.add(key)
        err = client_error(KafkaError._UNSUPPORTED_FEATURE,
                           f"{conn.host}:{conn.port}: the broker has no version of "
                           f"{api.name.title().replace('_', '')} that this client speaks")
        self.log.warning("%s", err.str())
        self.report_error(err)

    def take_errors(self) -> List[KafkaError]:
        return self._take("errors")

    def take_throttle_events(self) -> List[ThrottleEvent]:
        return self._take("throttle_events")

    def take_callback_failures(self) -> List[Exception]:
        return self._take("callback_failures")

    def _callback_failed(self, exc: Exception) -> None:
        """I/O thread: a connection callback of the application (resolve_cb, socket_cb,
        ...) raised; the exception goes on to the caller of poll()/flush()/consume()."""
        self._keep("callback_failures", exc)

    def _token_refresh_failed(self, message: str, exc: Exception) -> None:
        """Token refresh thread: an OAUTHBEARER token could not be had (retried in 10 s):
        _AUTHENTICATION for error_cb, as librdkafka's; what the application's oauth_cb
        raised also goes on to the caller of poll()/flush()/consume(), after it."""
        self.report_error(KafkaError(KafkaError._AUTHENTICATION, message))
        if self.config["oauth_cb"] is not None:
            self._keep("callback_failures", exc)

    @staticmethod
    def broker_id(conn: BrokerConnection) -> int:
        """The broker's node id behind a connection (dedicated connections are keyed
        apart, see COORDINATOR_KEY_BASE and FETCH_LANE_KEY_BASE; a bootstrap connection
        not yet matched to a broker has a negative id)."""
        node_id = conn.node_id
        if node_id > (COORDINATOR_KEY_BASE + FETCH_LANE_KEY_BASE) // 2:
            return COORDINATOR_KEY_BASE - node_id
        if node_id > (FETCH_LANE_KEY_BASE + FETCH_KEY_BASE) // 2:
            return FETCH_LANE_KEY_BASE - node_id
        if node_id > FETCH_KEY_BASE // 2:
            return FETCH_KEY_BASE - node_id
        return node_id

    @classmethod
    def broker_name(cls, conn: BrokerConnection) -> str:
        """librdkafka's name of a broker: ``host:port/id`` (``/bootstrap`` before its id
        is known)."""
        node_id = cls.broker_id(conn)
        return f"{conn.host}:{conn.port}/{node_id if node_id >= 0 else 'bootstrap'}"

    def broker_stats(self, request_names: Sequence[str] = (),
                     toppars: Optional[Dict[int, List[Tuple[str, int]]]] = None
                     ) -> Dict[str, Dict[str, Any]]:
        """Any thread: the ``brokers`` object of librdkafka's statistics JSON (times in
        microseconds, throttle in milliseconds; the windows cover the time since the last
        document). ``request_names``: librdkafka's request names for this client type
        (see kafka_client._stats); ``toppars``: the partitions the client has with each
        broker (by node id) as leader.

        As librdkafka 2.16's: every broker the metadata lists has its ``host:port/id``
        entry (``INIT`` while never connected), a bootstrap connection is listed under
        the broker at its address, and only a bootstrap server the metadata has not
        named yet is an entry ``host:port/bootstrap`` of its own (``configured``)."""
        out: Dict[str, Dict[str, Any]] = {}
        now = time.monotonic()
        toppars = toppars or {}
        metadata = self.metadata
        listed: Dict[int, Tuple[str, int]] = {}
        for node in list(metadata.listed_brokers):
            known = metadata.brokers.get(node)
            if known is not None:
                listed[node] = (known[0], known[1])
        by_address = {address: node for node, address in listed.items()}

        def since(t: float) -> int:
            return int((now - t) * 1e6) if t else -1

        conns = list(self.conns.values())
        # a broker's own connections first: a bootstrap one at the same address after them
        conns.sort(key=lambda c: self.broker_id(c) < 0)
        for conn in conns:
            purpose = self._dedicated_conns.get(conn)
            node = self.broker_id(conn)
            if node < 0 and purpose is None:
                node = by_address.get((conn.host, conn.port), node)
            name = f"{conn.host}:{conn.port}/{node if node >= 0 else 'bootstrap'}"
            if purpose is not None:
                name += "/" + purpose  # a connection of its own (see COORDINATOR_KEY_BASE)
            if name in out:
                continue   # a bootstrap connection beside the broker's own
            out[name] = self._broker_entry(
                name, node, conn.host, conn.port, request_names,
                toppars.get(node, ()) if purpose is None else ())
            out[name].update({
                "source": "learned" if node >= 0 else "configured",
                "state": _LIBRDKAFKA_STATE.get(conn.state, conn.state)
                if conn.connect_count else "INIT",
                "stateage": since(conn.state_since),
                "outbuf_cnt": conn.queued, "waitresp_cnt": conn.in_flight,
                "tx": conn.tx_requests, "txbytes": conn.tx_bytes, "txerrs": conn.tx_errors,
                "txidle": since(conn.last_tx), "req_timeouts": conn.request_timeouts,
                "rx": conn.rtt_count, "rxbytes": conn.rx_bytes, "rxerrs": conn.rx_errors,
                "rxcorriderrs": conn.rx_corrid_errors, "rxidle": since(conn.last_rx),
                "req": request_counts(conn.requests_by_api, request_names),
                "connects": conn.connect_count, "disconnects": conn.disconnects,
                "outbuf_latency": conn.outbuf_latency.roll(1e6),
                "rtt": conn.rtt.roll(1e6),
                "throttle": conn.throttle.roll(),
            })
        for node, (host, port) in listed.items():
            name = f"{host}:{port}/{node}"
            if name not in out:   # listed, never connected to
                out[name] = self._broker_entry(name, node, host, port, request_names,
                                               toppars.get(node, ()))
                out[name]["stateage"] = since(metadata.listed_at.get(node, 0.0))
        return out

    @staticmethod
    def _broker_entry(name: str, node: int, host: str, port: int,
                      request_names: Sequence[str],
                      toppars: Sequence[Tuple[str, int]]) -> Dict[str, Any]:
        """A broker's statistics entry with nothing sent or received (librdkafka's
        fields in its order; ``INIT``, never connected)."""
        return {
            "name": name, "nodeid": node, "nodename": f"{host}:{port}",
            "source": "learned", "state": "INIT", "stateage": -1,
            "outbuf_cnt": 0, "outbuf_msg_cnt": 0, "waitresp_cnt": 0, "waitresp_msg_cnt": 0,
            "tx": 0, "txbytes": 0, "txerrs": 0, "txretries": 0, "txidle": -1,
            "req_timeouts": 0, "rx": 0, "rxbytes": 0, "rxerrs": 0, "rxcorriderrs": 0,
            "rxpartial": 0, "rxidle": -1, "req": request_counts({}, request_names),
            "zbuf_grow": 0, "buf_grow": 0, "wakeups": 0, "connects": 0, "disconnects": 0,
            "int_latency": empty_window(), "outbuf_latency": empty_window(),
            "rtt": empty_window(), "throttle": empty_window(),
            "toppars": {f"{t}-{p}": {"topic": t, "partition": p} for t, p in toppars},
        }

    def _on_throttle(self, conn: BrokerConnection, throttle_ms: int) -> None:
        """I/O thread: a broker's answer carried a throttle time (see
        BrokerConnection.on_throttle); a ThrottleEvent for throttle_cb when it is > 0,
        or 0 while the last one reported was not."""
        if throttle_ms <= 0 and self._last_throttle_ms <= 0:
            return
        self._last_throttle_ms = throttle_ms
        if not self._wants_throttle_events:
            return
        self._keep("throttle_events", ThrottleEvent(self.broker_name(conn),
                                                    self.broker_id(conn), throttle_ms / 1000.0))

    # -- client metrics (KIP-714) ---------------------------------------------------------
    def start_telemetry(self, kind: str, name: str, sources: List[Source],
                        resource: Callable[[], Dict[str, Any]] = dict,
                        overall_latency: bool = False) -> None:
        """Application thread, before the I/O thread starts: push this client's metrics
        when a broker subscribes to them (unless ``enable.metrics.push`` is off). The
        connection metrics come first (with ``overall_latency``, also the request
        latency over all brokers, as librdkafka's producer), then ``sources``' (see
        :class:`~kafka_client._cluster.telemetry.Telemetry`)."""
        self._overall_latency = overall_latency
        self.telemetry = Telemetry(self.config, self, self.io, kind, name,
                                   [self._connection_samples] + sources, resource)

    def _connection_samples(self, elapsed: float) -> List[Sample]:
        """I/O thread, for a metrics push: connections made (total, per second since the
        last push) and request latency per broker and over all of them (ms, since the
        last push)."""
        made = self.connections_made
        out = [Sample("connection.creation.rate", (made - self._connections_at_push) / elapsed),
               Sample("connection.creation.total", made, counter=True)]
        self._connections_at_push = made
        by_node: Dict[int, IntervalStat] = {}
        overall = IntervalStat()
        for conn in list(self.conns.values()):
            by_node.setdefault(self.broker_id(conn), IntervalStat()).merge(conn.rtt_window)
            overall.merge(conn.rtt_window)
            conn.rtt_window.take()
        for node, stat in sorted(by_node.items()):
            out += interval_samples("node.request.latency", stat, attributes={"node.id": node})
        if self._overall_latency:
            out += interval_samples("request.latency", overall)
        return out

    # -- metadata --------------------------------------------------------------------
    def want_topics(self, topics: List[str]) -> None:
        """I/O thread: keep metadata for these topics. Topics already in the cache (a
        list_topics() answer, say) are announced to the listeners at once."""
        self.metadata.want(topics)
        known = {t for t in topics if t in self.metadata.topics}
        if known:
            for cb in self.on_metadata:
                try:
                    cb(known)
                except Exception:
                    self.log.exception("metadata listener failed")

    def _tick(self, now: float) -> Optional[float]:
        if self.closed:
            return None
        nxt = None
        for conn in list(self.conns.values()):
            when = conn.service(now)
            if when is not None and (nxt is None or when < nxt):
                nxt = when
        due = self.metadata.due(now)
        if due is not None:
            if due <= now:
                if not self._send_metadata(now):
                    self._kick_connect(now)
                    due = now + 0.05  # look again shortly
            if due > now and (nxt is None or due < nxt):
                nxt = due
        if self.connections_made and all(c.state == DISCONNECTED for c in self.conns.values()):
            # Keep one connection to the cluster once there was one, as librdkafka does
            # (one attempt a second, within each broker's reconnect backoff): an idle
            # client that lost it would otherwise notice neither the cluster going away
            # (no _ALL_BROKERS_DOWN, ever) nor coming back until its next request.
            if now >= self._next_keep_connected:
                self._next_keep_connected = now + 1.0
                self._kick_connect(now)
            if nxt is None or self._next_keep_connected < nxt:
                nxt = self._next_keep_connected
        return nxt

    def _send_metadata(self, now: float, topics: Any = "cache",
                       callback: Optional[Callable[[Any, Optional[KafkaError]], None]] = None,
                       timeout: Optional[float] = None,
                       conn: Optional[BrokerConnection] = None,
                       may_create: bool = False) -> bool:
        if conn is None:
            conn = self._ready_conn()
        if conn is None:
            return False
        version = conn.version_for(ApiKey.METADATA)
        if version is None:
            if conn.ready:
                self.report_missing_api(conn, ApiKey.METADATA)
            return False
        for_cache = topics == "cache"
        if for_cache:
            topics = self.metadata.take_request_topics()
        req_topics = None if topics is None else [
            MetadataRequest.MetadataRequestTopic(name=t) for t in topics]
        if version == 0 and req_topics is None:
            req_topics = []  # v0: an empty list means every topic
        req = MetadataRequest(topics=req_topics)
        if version >= 4:     # before v4 the broker's auto.create.topics.enable decides
            req.allow_auto_topic_creation = self.auto_create and (for_cache or may_create)

        def done(resp: Any, err: Optional[KafkaError]) -> None:
            t = time.monotonic()
            if err is None:
                changed = self.metadata.update(resp, t, topics)
                for cb in self.on_metadata:
                    try:
                        cb(changed)
                    except Exception:
                        self.log.exception("metadata listener failed")
            elif for_cache:
                # retried all the same: say why it fails (not when the client's close
                # ended it)
                if not err.retriable() and not self.closed:
                    self.log.warning("Metadata request to %s:%s failed: %s", conn.host,
                                     conn.port, err.str())
                self.metadata.failed(topics, t)
            if callback is not None:
                callback(resp, err)

        if for_cache:
            self._md_conn = conn
        conn.send(req, done, version=version, timeout=timeout)
        return True

    def ready_connection(self, now: float) -> Optional[BrokerConnection]:
        """I/O thread: the least busy ready broker connection (never a coordinator's); when
        none is up, starts connecting one and returns None."""
        conn = self._ready_conn()
        if conn is None:
            self._kick_connect(now)
        return conn

    def request_metadata(self, topics: Optional[List[str]],
                         callback: Callable[[Any, Optional[KafkaError],
                                             Optional[BrokerConnection]], None],
                         deadline: float, refused_ends: bool = False,
                         may_create: bool = False) -> None:
        """I/O thread: one Metadata request for ``topics`` (None: every topic; ``[]``:
        only brokers, controller and cluster id), sent to the least busy ready connection
        once one is up, and sent again after a retriable error, until ``deadline``
        (monotonic). The cache is updated; ``callback(response, error, connection)`` runs
        once, with ``(None, None, None)`` if no answer came before the deadline. With
        ``refused_ends``, it runs with the error as soon as a connection attempted
        meanwhile is refused (:meth:`_refused_since`). With ``may_create``, the request
        lets the broker create the topics when ``allow.auto.create.topics`` is on."""
        finished = [False]
        started = time.monotonic()
        waiting = object()  # this request's key among the ready waiters

        def answer(resp: Any, err: Optional[KafkaError],
                   conn: Optional[BrokerConnection]) -> None:
            if not finished[0]:
                finished[0] = True
                callback(resp, err, conn)

        def attempt() -> None:
            now = time.monotonic()
            if finished[0]:
                return
            if self.closed:
                answer(None, KafkaError(KafkaError._DESTROY, "client is closing"), None)
                return
            if now >= deadline:
                answer(None, None, None)
                return
            conn = self.ready_connection(now)
            if conn is None:
                refused = self._refused_since(started) if refused_ends else None
                if refused is not None:
                    answer(None, refused, None)
                    return
                self.retry_when_ready(waiting, min(CONNECT_POLL_S, deadline - now), attempt)
                return

            def answered(resp: Any, err: Optional[KafkaError]) -> None:
                if err is not None and err.retriable():
                    self.io.call_later(0.05, attempt)  # try another connection
                    return
                answer(resp, err, conn)

            if not self._send_metadata(now, topics, answered, timeout=deadline - now,
                                       conn=conn, may_create=may_create):
                self.retry_when_ready(waiting, min(CONNECT_POLL_S, deadline - now), attempt)

        attempt()

    def _refused_since(self, since: float, ending: bool = False) -> Optional[KafkaError]:
        """I/O thread: the authentication, TLS or unsupported-version error that refused a
        connection attempted since ``since`` (monotonic), when no connection is up or under
        way: retrying would meet the same credentials, certificates or broker, so a
        blocking call ends with it at once (as the Java client's do) instead of at its
        timeout. ``ending``: the call ends anyway (its deadline passed), so an attempt
        still under way does not count, only one that is up."""
        recent = self.last_connection_error
        if recent is None or recent[0] < since or recent[1].code() not in _SETUP_REFUSED:
            return None
        if any(c.state == READY if ending else c.state != DISCONNECTED
               for c in self.conns.values()):
            return None
        return recent[1]

    def _metadata_blocking(self, topics: Optional[List[str]], timeout: Optional[float],
                           what: str, may_create: bool = False) -> Tuple[Any, BrokerConnection]:
        """Application thread: :meth:`request_metadata` waited for at most ``timeout``
        seconds (None = socket.timeout.ms); raises KafkaException saying ``what`` failed."""
        if timeout is None or timeout < 0:
            timeout = self.settings.request_timeout
        started = time.monotonic()
        deadline = started + timeout
        box: List[Any] = []
        done = threading.Event()

        def answer(resp: Any, err: Optional[KafkaError],
                   conn: Optional[BrokerConnection]) -> None:
            box.append((resp, err, conn))
            done.set()

        self.io.call_soon(self.request_metadata, topics, answer, deadline, True, may_create)
        self.wait_for(done, deadline)
        resp, err, conn = box[0] if box else (None, None, None)
        if err is not None:
            raise KafkaException(err)
        if resp is None:
            last = None
            for c in self.conns.values():
                if c.last_error is not None:
                    last = c.last_error
            if last is not None and not any(c.state == READY for c in self.conns.values()):
                raise KafkaException(client_error(
                    last.code() if last.code() in _SETUP_REFUSED else KafkaError._TRANSPORT,
                    f"Failed to {what} within {timeout:g}s: {last.str()}"))
            recent = self.last_connection_error
            why = f" (a connection failed meanwhile: {recent[1].str()})" \
                if recent is not None and recent[0] >= started else ""
            raise KafkaException(client_error(KafkaError._TIMED_OUT,
                                              f"Failed to {what} within {timeout:g}s{why}"))
        assert conn is not None   # an answer comes with the connection it came on
        return resp, conn

    def list_topics(self, topic: Optional[str], timeout: Optional[float]) -> ClusterMetadata:
        """Application thread: one Metadata request (every topic, or ``topic``), waited for
        at most ``timeout`` seconds (None = socket.timeout.ms). A named topic that does not
        exist is created when ``allow.auto.create.topics`` is on (and the broker allows
        it), as librdkafka's rd_kafka_metadata() asks: the producer's and AdminClient's
        default."""
        resp, conn = self._metadata_blocking(None if topic is None else [topic], timeout,
                                             "get metadata", may_create=topic is not None)
        node_id = conn.node_id
        if node_id < 0:  # a bootstrap connection: the answer says which broker it is
            node_id = next((b.node_id for b in resp.brokers or ()
                            if (b.host, b.port) == (conn.host, conn.port)), node_id)
        # topic.blacklist hides topics from the cache, not from this answer: librdkafka's
        # rd_kafka_metadata() (confluent-kafka's list_topics()) lists them too.
        return ClusterMetadata.from_response(resp, node_id,
                                             f"{conn.host}:{conn.port}/{node_id}")

    def cluster_id(self, timeout: Optional[float]) -> Optional[str]:
        """Application thread: the cluster id (KIP-78) the brokers report; asked for
        (waiting at most ``timeout`` seconds, None = socket.timeout.ms) if no metadata
        answer has given it yet. None when the broker has no cluster id (Metadata older
        than v2); raises KafkaException _TIMED_OUT when no broker answered (or the error
        that refused the connections: authentication, TLS)."""
        known = self.metadata.cluster_id
        if known is not None:
            return known
        try:
            resp, _conn = self._metadata_blocking([], timeout, "retrieve cluster id")
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() != KafkaError._TRANSPORT:
                raise
            # librdkafka's rd_kafka_clusterid() only waits for an answer: no broker
            # reached is a timeout there (confluent-kafka raises _TIMED_OUT).
            raise KafkaException(client_error(KafkaError._TIMED_OUT, error.str())) from None
        return getattr(resp, "cluster_id", None)

    def close(self, graceful: bool = True) -> List[BrokerConnection]:
        """I/O thread: close every connection. Queued requests fail with _DESTROY;
        with ``graceful``, ready connections finish writing and wait for the broker to
        close (see BrokerConnection.shutdown). Returns the connections still closing."""
        self.closed = True
        self.io.remove_tick(self._tick)
        self.settings.security.close()  # stops the OAUTHBEARER token refresh, if any
        closing = []
        for conn in list(self.conns.values()):
            conn.on_state = None
            if graceful and conn.ready and conn.in_flight == 0:
                if conn.shutdown():
                    closing.append(conn)
                continue
            conn.close(KafkaError(KafkaError._DESTROY, "client is closing"), fail_queued=True)
        return closing
