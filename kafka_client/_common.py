"""What every client class shares: its lifecycle (:class:`ClientBase`: configuration,
I/O thread, cluster, start, close, drop), configuration from keyword arguments, ``debug``
contexts, and the policy for application callbacks.

Callbacks (``on_delivery``, ``on_commit``, ``on_assign``/``on_revoke``/``on_lost``,
``error_cb``, ``stats_cb``, ...) run on the application thread, inside ``poll()``,
``flush()``, ``consume()`` and ``close()``. One policy for all of them, as in
confluent-kafka: an exception a callback raises goes on to the caller of that method,
and only after the client's own bookkeeping for what the callback was about is done
(queue room and counts released, an assignment applied, a commit result recorded);
callbacks not run yet stay queued and run from the next call. ``close()`` finishes
closing first and then raises the first such exception."""
from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import logging
import os
import threading
import time
import weakref
from collections import deque
from typing import (
    Any,
    Callable,
    Deque,
    Dict,
    Iterator,
    List,
    Mapping,
    NoReturn,
    Optional,
    Sequence,
    Set,
    Tuple,
    TypeVar,
    Union,
)

from kafka_client._cluster.cluster import Cluster
from kafka_client._cluster.metadata import ClusterMetadata
from kafka_client._model import ThrottleEvent
from kafka_client._net.io_thread import IOThread
from kafka_client._stats import PRODUCER_REQUESTS
from kafka_client.config import ClientConfig, describe
from kafka_client.errors import KafkaError, KafkaException

__all__ = ["CallbackGate", "ClientBase", "make_config", "apply_debug", "deadline_after",
           "stop_client", "wait_limit"]

# librdkafka debug contexts -> our loggers (one per component)
DEBUG_LOGGERS = {
    "broker": ("kafka_client.connection", "kafka_client.io"),
    "protocol": ("kafka_client.connection",),
    "metadata": ("kafka_client.metadata", "kafka_client.cluster"),
    "topic": ("kafka_client.metadata",),
    "msg": ("kafka_client.producer", "kafka_client.producer.sender"),
    "queue": ("kafka_client.producer",),
    "eos": ("kafka_client.producer.idempotence", "kafka_client.producer.transactions"),
    "fetch": ("kafka_client.consumer.fetcher",),
    "consumer": ("kafka_client.consumer",),
    "cgrp": ("kafka_client.consumer.group",),
    "generic": ("kafka_client",),
    "all": ("kafka_client",),
}


def make_config(config: Optional[Dict[str, Any]], kwargs: Dict[str, Any],
                role: str) -> ClientConfig:
    """A client's configuration from a dict plus keyword overrides (``linger_ms=5`` is
    ``linger.ms``); raises KafkaException(_INVALID_ARG) naming a bad property, and
    TypeError when neither is given.

    ``default.topic.config`` is the ``default_topic_conf`` property (see
    :mod:`kafka_client.config`)."""
    if config is not None and not isinstance(config, Mapping):
        raise TypeError(f"expected configuration dict, not {type(config).__name__}")
    if config is None and not kwargs:
        # As confluent-kafka: Producer(), Consumer(None) are mistakes, not empty configs
        raise TypeError("expected configuration dict")
    conf = dict(config or {})
    for k, v in kwargs.items():
        conf[_kwarg_name(k)] = v
    return ClientConfig.from_dict(conf, role=role)  # type: ignore[arg-type]


def apply_debug(contexts: Sequence[str]) -> None:
    """``debug=...``: turn on DEBUG logging for the components the contexts name."""
    for ctx in contexts or ():
        for name in DEBUG_LOGGERS.get(ctx, ()):
            logging.getLogger(name).setLevel(logging.DEBUG)


def _kwarg_name(name: str) -> str:
    """A keyword argument's property name: as given if it is one (``log_level``,
    ``on_delivery``), else with underscores as dots (``linger_ms`` -> ``linger.ms``) if
    that is one; else as given, so that the "no such property" error names what the
    application wrote."""
    for candidate in (name, name.replace("_", ".")):
        try:
            describe(candidate)
            return candidate
        except KafkaException:
            pass
    return name


def deadline_after(timeout: Optional[float]) -> float:
    """Monotonic time a call given ``timeout`` seconds ends (None or negative: never; NaN:
    now, as confluent-kafka's calls return at once); TypeError for what is not a number."""
    if timeout is None:
        return float("inf")
    if not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number of seconds, not {type(timeout).__name__}")
    if timeout != timeout:   # NaN: a deadline of NaN never passed, and the wait spun
        return time.monotonic()
    return float("inf") if timeout < 0 else time.monotonic() + timeout


def wait_limit(timeout: Any) -> Optional[float]:
    """Seconds a blocking call may wait (None: its default, for None or negative; NaN: 0);
    TypeError for what is not a number of seconds (a bool included)."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number of seconds, not {type(timeout).__name__}")
    if timeout != timeout:
        return 0.0
    return None if timeout < 0 else float(timeout)


#: how long close() waits for a callback another application thread is running (one
#: that never returns must not keep close() from returning)
CALLBACKS_WAIT_S = 30.0


class CallbackGate:
    """Which application threads are running a client's callbacks, and which are in its
    ``close()``: the state behind two promises of close(), as confluent-kafka's close()
    keeps them. Once close() returns, no callback of the client is still running on
    another thread (:meth:`wait_for_others`), and a close() from another thread
    meanwhile returns only once the first has finished (:meth:`begin_close`,
    :meth:`wait_for_close`). Threads in close() are never waited for: a callback of
    another thread's call that itself calls close() must not wait for the closer that
    waits for it."""

    __slots__ = ("_changed", "_running", "_closers", "_owner", "_waiting")

    def __init__(self) -> None:
        self._changed = threading.Condition(threading.Lock())
        #: thread id -> depth (a callback may call poll() again)
        self._running: Dict[int, int] = {}
        self._closers: Set[int] = set()
        self._owner: Optional[int] = None     # the thread doing the closing
        self._waiting = 0                     # threads waiting for a change

    # ``with gate:`` around the callbacks a thread runs. Entering and leaving take no
    # lock (every consume() loop does them): each thread writes only its own key, one
    # dict operation at a time under the GIL; a closer reads a copy of the keys (list()
    # of a dict runs no Python code: atomic), and one waiting is counted before it
    # looks, so a leave after its look notifies it.

    def __enter__(self) -> None:
        me = threading.get_ident()
        running = self._running
        running[me] = running.get(me, 0) + 1

    def __exit__(self, *exc: Any) -> None:
        me = threading.get_ident()
        running = self._running
        depth = running[me] - 1
        if depth:
            running[me] = depth
            return
        del running[me]
        if self._waiting:
            with self._changed:
                self._changed.notify_all()

    def closing_here(self) -> bool:
        """The calling thread is in close() (or a callback close() runs)."""
        return threading.get_ident() in self._closers

    def begin_close(self, finished: Callable[[], bool], deadline: float) -> bool:
        """The calling thread enters close(): True when it is to do the closing (then
        :meth:`end_close` after, always). False when the thread is in close() already
        (a callback close() runs called it again), or another thread's close() was
        under way: waited for until it ended or until ``deadline``. (``finished()``
        tells whether that one closed the client: if not, a Ctrl-C stopped it, and this
        close() takes over.)"""
        me = threading.get_ident()
        with self._changed:
            if me in self._closers:
                return False
            self._closers.add(me)
            try:
                self._wait_for_owner(deadline)
            except BaseException:
                self._closers.discard(me)
                raise
            if self._owner is None and not finished():
                self._owner = me
                return True
            self._closers.discard(me)
            return False

    def wait_for_close(self, deadline: float) -> None:
        """Until ``deadline``: a close() of another thread under way ends (for a close()
        that finds the client closed already: it may still be finishing)."""
        me = threading.get_ident()
        with self._changed:
            if me in self._closers:
                return
            self._closers.add(me)     # a callback's close(): not waited for in turn
            try:
                self._wait_for_owner(deadline)
            finally:
                self._closers.discard(me)

    def _wait_for_owner(self, deadline: float) -> None:
        # the lock held
        self._waiting += 1
        try:
            while self._owner is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self._changed.wait(min(remaining, 0.2))  # short slices: Ctrl-C gets in
        finally:
            self._waiting -= 1

    def end_close(self) -> None:
        """The thread that :meth:`begin_close` chose is done closing."""
        me = threading.get_ident()
        with self._changed:
            self._closers.discard(me)
            if self._owner == me:
                self._owner = None
            self._changed.notify_all()

    @contextlib.contextmanager
    def closing_for(self, thread: int) -> Iterator[None]:
        """``thread`` counts as in close() meanwhile: a close() made, on another thread,
        by a callback that ``thread`` waits for (the asyncio clients run the callbacks
        on their event loop while the thread serving them waits) must not wait for it."""
        with self._changed:
            added = thread not in self._closers
            self._closers.add(thread)
        try:
            yield
        finally:
            if added:
                with self._changed:
                    self._closers.discard(thread)

    def wait_for_others(self, deadline: float) -> bool:
        """Until ``deadline``: the callbacks threads not in close() are running end.
        Returns whether they did."""
        changed = self._changed
        with changed:
            self._waiting += 1
            try:
                while any(t not in self._closers for t in list(self._running)):
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    changed.wait(min(remaining, 0.2))
                return True
            finally:
                self._waiting -= 1


def stop_client(io: Any, cluster: Any, first: Optional[Callable[[], None]] = None,
                grace: float = 2.0) -> None:
    """Close a client's connections on its I/O thread (after ``first()``, run there too,
    and the last metrics push, when metrics are pushed), letting ready ones close
    gracefully for up to ``grace`` seconds, then stop the thread."""
    done = threading.Event()
    deadline = time.monotonic() + grace

    def stop() -> None:
        if first is not None:
            first()
        if cluster.telemetry is not None:
            cluster.telemetry.terminate(close)
        else:
            close()

    def close() -> None:
        closing = cluster.close()

        def check() -> None:
            if all(c.sock is None for c in closing) or time.monotonic() >= deadline:
                for c in closing:
                    c.close(None)
                done.set()
            else:
                io.call_later(0.005, check)

        check()

    if io.alive and io.in_thread():
        # From the I/O thread itself (a callback there closing its client): nothing that
        # thread would do can be waited for, so the connections close at once (it
        # waited grace + 1 s for a stop() queued behind itself).
        if first is not None:
            first()
        for conn in cluster.close():
            conn.close(None)
    elif io.alive:
        io.call_soon(stop)
        done.wait(grace + 1)
    io.stop(5)


def _connect_at_start(io: IOThread, cluster: Cluster) -> None:
    """Connect to the bootstrap brokers as soon as the client exists, one after the
    other until one is up or each was tried once, as librdkafka does: a wrong
    ``bootstrap.servers`` shows at once (error_cb: _TRANSPORT for each, then
    _ALL_BROKERS_DOWN), not at the first produce() or fetch."""
    def attempt() -> None:
        if cluster.closed or any(c.ready for c in cluster.conns.values()):
            return
        cluster._kick_connect(time.monotonic())
        if any(c.connect_count == 0 for c in cluster.bootstrap):
            io.call_later(0.05, attempt)

    io.call_soon(attempt)


_Client = TypeVar("_Client", bound="ClientBase")

#: what confluent-kafka's calls served from its shared handle raise once closed
HANDLE_CLOSED_TEXT = "Handle has been closed"

#: the clients of this process that are open, for the exit hook (weak: an open client
#: the application drops is still collected)
_open_clients: "weakref.WeakSet[ClientBase]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """A forked child inherits the parent's clients without their I/O threads: each
    refuses to be used from now on (KafkaException from every method), sends nothing,
    and is forgotten by the exit hook, so the child exits as if it had none."""
    inherited = list(_open_clients)
    _open_clients.clear()
    for client in inherited:
        client._on_fork()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)


@atexit.register
def _at_exit() -> None:
    """Interpreter exit: each client still open does what it must before its daemon
    I/O thread is killed (a Producer reports what it loses)."""
    for client in list(_open_clients):
        try:
            client._at_exit()
        except Exception:  # pragma: no cover - nothing may stop the others
            pass

#: per role, numbers the clients' I/O threads (kafka-producer-1, kafka-consumer-1, ...)
_client_numbers: Dict[str, "itertools.count[int]"] = {}
#: numbers every client of the process, whatever its role, for the statistics' ``name``
#: (librdkafka's handle name, ``<client.id>#<type>-<n>``, counts all its handles alike)
_handle_numbers = itertools.count(1)


class ClientBase:
    """The lifecycle Producer and Consumer share: configuration, logger, one I/O thread
    and the cluster it drives; start, close, context manager, and what happens when the
    application drops a client it never closed.

    A subclass calls :meth:`_init_client` first in its ``__init__`` and
    :meth:`_start_client` last, implements ``close()``, and may override
    :meth:`_on_shutdown`. Nothing the I/O thread holds may refer to the client itself
    (no bound methods of it as callbacks or ticks, only of the parts it owns): an
    unclosed client the application lets go of is then garbage at once, and
    ``__del__`` stops its thread and connections.
    """

    _role = "client"            # "producer", "consumer": config role, thread and log names
    _work = "done"              # what nothing will be without brokers ("delivered", ...)
    _closed_text = "Client has been closed"   # confluent-kafka's words, per class
    #: usable only between _start_client() and close(); True at class level, so a
    #: subclass whose __init__ never called ours is refused cleanly too
    _closed = True
    #: set in a forked child for the clients it inherited (see _after_fork_in_child)
    _forked = False
    #: connect to the bootstrap brokers at construction (librdkafka's producer does;
    #: its consumer waits for an assignment or subscription)
    _connects_at_start = False
    #: a serializing client's serdes (``_serde_builders.ClientSerdes``, or the
    #: ``AsyncClientSerdes`` of the asyncio client wrapping it): those it built from
    #: builders are closed by its close(), and after it stops when it is dropped without one
    _serdes: Any = None

    def _init_client(self, config: Optional[Dict[str, Any]],
                     kwargs: Dict[str, Any]) -> ClientConfig:
        """Parse the configuration; make the logger, the I/O thread (not started) and
        the cluster."""
        self._closed = True
        self._config = cfg = make_config(config, kwargs, self._role)
        logger = cfg["logger"]
        self._log = logger if logger is not None else \
            logging.getLogger(f"kafka_client.{self._role}")
        number = next(_client_numbers.setdefault(self._role, itertools.count(1)))
        self._io = IOThread(name=f"kafka-{self._role}-{number}",
                            log=cfg.logger_for("kafka_client.io"))
        self._stats_name = f"{cfg['client.id']}#{self._stats_type}-{next(_handle_numbers)}"
        self._cluster = Cluster(cfg, self._io)
        self._error_cb: Optional[Callable] = cfg["error_cb"]
        self._stats_cb: Optional[Callable] = cfg["stats_cb"]
        self._throttle_cb: Optional[Callable] = cfg["throttle_cb"]
        self._started = time.monotonic()
        self._stats_interval = cfg["statistics.interval.ms"] / 1000.0
        self._stats_on = self._stats_cb is not None and self._stats_interval > 0
        self._next_stats = self._started + self._stats_interval
        self._stats_lock = threading.Lock()
        self._gate = CallbackGate()
        #: client-level errors and throttle events taken from the cluster, not yet
        #: handed to error_cb / throttle_cb, and exceptions an oauth_cb raised on the
        #: token refresh thread, not yet raised to the application
        self._errors: Deque[Union[KafkaError, ThrottleEvent, Exception]] = deque()
        return cfg

    def _start_client(self) -> None:
        """Apply ``debug``, start the I/O thread; the client is open from here."""
        cfg = self._config
        apply_debug(cfg["debug"])
        self._closed = False
        self._pid = os.getpid()
        _open_clients.add(self)
        self._io.start()
        if cfg["bootstrap.servers"] is None or not cfg.broker_addresses():
            self._log.warning("No bootstrap.servers configured: nothing will be %s",
                              self._work)
        elif self._connects_at_start:
            _connect_at_start(self._io, self._cluster)

    def close(self) -> Any:  # pragma: no cover - every client defines its own
        raise NotImplementedError

    def _check_open(self) -> None:
        """Raise unless the client can be used (one attribute test when it can)."""
        if self._closed:
            self._refuse()

    def _refuse(self) -> NoReturn:
        """Raise the reason this client cannot be used: RuntimeError once closed, as
        confluent-kafka does, or when its ``__init__`` never ran; KafkaException in a
        process forked from the one that made it."""
        if self._forked:
            name = type(self).__name__
            raise KafkaException(KafkaError(
                KafkaError._STATE,
                f"This {name} was created in process {self._pid} and cannot be used in "
                f"process {os.getpid()}, a fork of it (its I/O thread and connections "
                f"stayed in the parent): create a new {name} in the child process",
                fatal=True))
        if "_io" not in vars(self):
            name = type(self).__name__
            raise RuntimeError(
                f"{name} is not initialized: {name}.__init__ must call "
                f"super().__init__(config) before the client is used")
        raise RuntimeError(self._closed_text)

    def _check_handle_open(self) -> None:
        """:meth:`_check_open` for the calls confluent-kafka serves from the handle every
        client type shares (``list_topics``, ``cluster_id``, ``set_sasl_credentials``,
        the AdminClient's ``list_groups``): closed, they raise RuntimeError("Handle has
        been closed") there, not the client's own closed text."""
        if self._closed:
            if self._forked or "_io" not in vars(self):
                self._refuse()
            raise RuntimeError(HANDLE_CLOSED_TEXT)

    def _serve_client_events(self) -> int:
        """Serve what every client type serves from poll() and its kin: the client-level
        events (:meth:`_serve_cluster_events`) and, every ``statistics.interval.ms``, one
        statistics document to ``stats_cb``; returns how many were served."""
        served = self._serve_cluster_events()
        if self._stats_cb is not None and self._stats_interval > 0:
            now = time.monotonic()
            if now >= self._next_stats:
                with self._stats_lock:  # one document per interval, whichever thread
                    due = now >= self._next_stats
                    self._next_stats = now + self._stats_interval
                if due:
                    served += 1
                    document = json.dumps(self._stats_doc())
                    with self._gate:
                        self._stats_cb(document)
        return served

    #: librdkafka's "type" in the statistics (its admin client is a producer handle)
    _stats_type = "producer"
    #: librdkafka's request names in the brokers' ``req`` objects for this client type
    _stats_requests: Sequence[str] = PRODUCER_REQUESTS

    def _stats_toppars(self) -> Dict[int, List[Tuple[str, int]]]:
        """The partitions this client has, by the node id of their leader (the brokers'
        ``toppars``)."""
        return {}

    def _stats_doc(self) -> Dict[str, Any]:
        """The statistics document in librdkafka's JSON shape, every top-level field:
        what every client has (its name, times, brokers and their totals, the metadata
        cache); subclasses fill in their own fields (queues, messages, topics)."""
        now, wall = time.monotonic(), time.time()
        brokers = self._cluster.broker_stats(self._stats_requests, self._stats_toppars())
        return {
            "name": self._stats_name, "client_id": self._config["client.id"],
            "type": self._stats_type, "ts": int(wall * 1e6), "time": int(wall),
            "age": int((now - self._started) * 1e6),
            "replyq": 0, "msg_cnt": 0, "msg_size": 0, "msg_max": 0, "msg_size_max": 0,
            "simple_cnt": 0,
            "metadata_cache_cnt": len(self._cluster.metadata.topics),
            "brokers": brokers, "topics": {},
            "tx": sum(b["tx"] for b in brokers.values()),
            "tx_bytes": sum(b["txbytes"] for b in brokers.values()),
            "rx": sum(b["rx"] for b in brokers.values()),
            "rx_bytes": sum(b["rxbytes"] for b in brokers.values()),
            "txmsgs": 0, "txmsg_bytes": 0, "rxmsgs": 0, "rxmsg_bytes": 0,
        }

    def _serve_cluster_events(self) -> int:
        """Hand the client-level events the I/O thread collected to their callbacks:
        errors to ``error_cb`` (or the debug log when there is none) except a fatal one,
        raised as KafkaException, broker throttle reports to ``throttle_cb`` (collected
        only when it is set); returns how many.
        What a callback raised off the application thread (``oauth_cb`` on the token
        refresh thread, the connection callbacks on the I/O thread) is raised here,
        after the errors reported before it were served. If a callback raises, the
        events after that one are served by the next call."""
        pending = self._errors
        cluster = self._cluster
        cluster.events_waiting = False     # before taking: one kept meanwhile sets it again
        if cluster.errors:
            pending.extend(cluster.take_errors())
        if cluster.throttle_events:
            pending.extend(cluster.take_throttle_events())
        if cluster.callback_failures:
            pending.extend(cluster.take_callback_failures())
        served = 0
        if not pending:
            return served
        error_cb = self._error_cb
        try:
            with self._gate:
                while pending:
                    try:
                        event = pending.popleft()  # other threads may serve too: one pop each
                    except IndexError:
                        break
                    served += 1
                    if isinstance(event, ThrottleEvent):
                        # kept by the cluster only when throttle_cb is set
                        assert self._throttle_cb is not None
                        self._throttle_cb(event)
                    elif isinstance(event, Exception):
                        raise event
                    elif event.fatal():
                        # Raised once by the call that serves it, not given to error_cb, as
                        # confluent-kafka does (a producer fenced or out of sequence)
                        raise KafkaException(event)
                    elif error_cb is not None:
                        error_cb(event)
                    else:
                        self._log.debug("client error: %s", event.str())
        finally:
            if pending:                    # left for the next call (a callback raised)
                cluster.events_waiting = True
        return served

    def list_topics(self, topic: Optional[str] = None,
                    timeout: Optional[float] = -1) -> ClusterMetadata:
        """Cluster metadata (every topic, or only ``topic``) from one Metadata request,
        waited for at most ``timeout`` seconds (-1 or None: socket.timeout.ms). Asking
        for a topic does not create it. Raises KafkaException (_TRANSPORT, _TIMED_OUT)
        when no broker answers in time."""
        self._check_handle_open()
        if topic is not None and not isinstance(topic, str):
            raise TypeError(f"topic must be a str or None, not {type(topic).__name__}")
        return self._cluster.list_topics(topic, wait_limit(timeout))

    def cluster_id(self, timeout: Optional[float] = -1) -> Optional[str]:
        """The cluster id (KIP-78), waited for at most ``timeout`` seconds (-1 or None:
        ``socket.timeout.ms``) when no metadata answer has given it yet; None when the
        brokers have none. Raises KafkaException _TIMED_OUT when no broker answered, as
        confluent-kafka's (or the error that refused the connections: authentication,
        TLS)."""
        self._check_handle_open()
        return self._cluster.cluster_id(wait_limit(timeout))

    def set_sasl_credentials(self, username: str, password: str) -> None:
        """Replace the SASL PLAIN/SCRAM username and password used by the next
        authentications; connections already authenticated keep theirs until they
        reconnect or re-authenticate (librdkafka's behaviour)."""
        self._check_handle_open()
        if not isinstance(username, str) or not isinstance(password, str):
            raise TypeError("username and password must be str")
        self._cluster.set_sasl_credentials(username, password)

    def _on_shutdown(self) -> Optional[Callable[[], None]]:
        """Application thread, once, as the client shuts down: refuse further use;
        returns what the I/O thread runs before the connections close (or None)."""
        return None

    def _shutdown(self) -> None:
        """Stop the I/O thread and close the connections (once)."""
        if self._closed:
            return
        self._closed = True
        _open_clients.discard(self)
        # Calls other threads are blocked in end now, not at their timeouts: nothing
        # will answer them once the I/O thread stops.
        self._cluster.abandon_waits()
        stop_client(self._io, self._cluster, first=self._on_shutdown())

    def _close_for_callback_of(self, waiting: Optional[int]) -> Any:
        """``close()`` made by a callback that thread ``waiting`` (if any) waits for while
        the callback runs elsewhere (the asyncio clients run callbacks on their loop):
        close() does not wait for that thread's callback, which is the one closing."""
        if waiting is None:
            return self.close()
        with self._gate.closing_for(waiting):
            return self.close()

    def _at_exit(self) -> None:
        """The interpreter exits with this client open (not closed, not collected)."""

    def _unclosed(self) -> None:
        """Application thread: what a client the application never closed does before
        it stops, when collected (off its I/O thread) or left open at exit."""

    def _stop_unclosed(self) -> None:
        """Application thread: a client never closed stops: :meth:`_unclosed`, then the
        I/O thread and the connections (whatever _unclosed() raised)."""
        if self._closed:
            return
        try:
            self._unclosed()
        finally:
            self._shutdown()
            self._close_serdes_unclosed()

    def _close_serdes_unclosed(self) -> None:
        # After the client stopped (nothing deserializes any more), as close() does;
        # logged, not raised: the application is not in a call.
        if self._serdes is None:
            return
        try:
            self._serdes.close()
        except Exception:
            self._log.warning("closing the serdes built for a %s dropped without close() "
                              "failed", self._role, exc_info=True)

    def _on_fork(self) -> None:
        """In a forked child, for each client inherited open: make every method refuse
        (nothing here may take a lock: another thread of the parent may have held it)."""
        self._forked = True
        self._closed = True   # one test on every call path, none per message

    def __enter__(self: _Client) -> _Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        # Dropped without close(): what _unclosed() does (a consumer commits and leaves
        # its group; no flush), then the thread stops and the connections close.
        try:
            if self._io.in_thread():
                # Collected on its own I/O thread (a cycle the collector found there):
                # it cannot wait for itself; the loop ends after this turn.
                if not self._closed:
                    self._closed = True
                    first = self._on_shutdown()
                    if first is not None:
                        first()
                self._io.stop(0)
            else:
                self._stop_unclosed()
        except Exception:
            pass
