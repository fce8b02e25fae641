"""Requests routed to the broker their API needs and retried until a deadline.

An admin operation (and later the transactional producer) says *where* a request must
go, not which socket: any broker, the controller, one broker by id, the coordinator of a
group or transactional id, or the leaders of some partitions. :class:`CallRunner` finds
that broker (asking for metadata or a FindCoordinator answer when it does not know it),
waits for its connection, negotiates the version, sends, and retries:

* errors the handler returns (retriable broker errors) after a backoff
  (``retry.backoff.ms`` doubling up to ``retry.backoff.max.ms``), until the deadline;
* "the role moved" errors (NOT_CONTROLLER, NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
  leader errors) forget the cached broker first, so the retry looks it up again;
* a request lost with its connection (closed or timed out while waiting for the answer)
  is sent again at most :data:`MAX_LOST` times: a broker that drops every such request
  (Tansu closes the connection on requests it cannot serve) fails the call promptly
  instead of at the deadline;
* an API the broker does not advertise, or only in versions too old for what was asked,
  fails at once with ``_UNSUPPORTED_FEATURE`` naming the API and the broker.

Everything here runs on the client's I/O thread; results leave through the callbacks.
"""
from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple

from kafka_client._backoff import retry_delay
from kafka_client._cluster.cluster import CONNECT_POLL_S
from kafka_client._cluster.metadata import coordinator_answer
from kafka_client._net.connection import DISCONNECTED, NEVER_SENT, READY, BrokerConnection
from kafka_client.errors import KafkaError, broker_code, client_error
from kafka_proto.enums import CoordinatorType
from kafka_proto.errors import ErrorCode
from kafka_proto.messages import ApiKey, FindCoordinatorRequest, api_info

__all__ = [
    "ANY_BROKER",
    "CONTROLLER",
    "Broker",
    "Coordinator",
    "Call",
    "CallError",
    "CallRunner",
    "PartitionKey",
    "MAX_LOST",
    "broker_error",
    "group_by_topic",
]

_log = logging.getLogger("kafka_client.calls")

#: Times a request lost with its connection is sent again before the call fails.
MAX_LOST = 2

PartitionKey = Tuple[str, int]


class _Anywhere:
    def __repr__(self) -> str:
        return "any broker"


class _Controller:
    def __repr__(self) -> str:
        return "the controller"


#: Any broker will do (the least busy ready connection).
ANY_BROKER = _Anywhere()
#: The cluster's controller, as Metadata reports it.
CONTROLLER = _Controller()


@dataclass(frozen=True)
class Broker:
    """One broker, by node id."""

    node_id: int

    def __repr__(self) -> str:
        return f"broker {self.node_id}"


@dataclass(frozen=True)
class Coordinator:
    """The coordinator of a group (or of a transactional id)."""

    key_type: CoordinatorType
    key: str

    def __repr__(self) -> str:
        kind = "group" if self.key_type == CoordinatorType.GROUP else "transactional id"
        return f"the coordinator of {kind} {self.key!r}"


#: Errors that mean the request went to the wrong broker: forget the routing, look again.
_CONTROLLER_MOVED = frozenset((ErrorCode.NOT_CONTROLLER,))
_COORDINATOR_MOVED = frozenset((ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE))
#: Partition errors that mean "ask the (new) leader again".
_LEADER_MOVED = frozenset((ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE,
                          ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH,
                          ErrorCode.REPLICA_NOT_AVAILABLE))


@dataclass(eq=False)
class Call:
    """One request and what to do with its answer.

    ``build(version)`` makes the request for the negotiated version (at least
    ``min_version``; raise :class:`CallError` for what that version cannot express).
    ``on_response(response, connection)`` handles an answer and returns None when the
    call is over, or the :class:`KafkaError` that makes it try again.
    ``on_failure(error)`` runs once if the call ends without a handled answer (deadline,
    unsupported API, lost connections, a routing error).
    """

    name: str
    api_key: ApiKey
    target: Any
    deadline: float
    build: Callable[[int], Any]
    on_response: Callable[[Any, BrokerConnection], Optional[KafkaError]]
    on_failure: Callable[[KafkaError], None]
    min_version: int = 0
    max_version: Optional[int] = None
    #: for a call to a partition's leader (a :class:`Broker`): when that broker cannot
    #: be reached, the call ends at once with ``reroute(error, lost)`` (``lost``: the
    #: request went out and its connection closed; else the connection was refused)
    #: for the caller to route it again on new metadata, instead of waiting for that
    #: broker until the deadline
    reroute: Optional[Callable[[KafkaError, bool], None]] = None
    # -- runner state --
    done: bool = field(default=False, init=False)
    tries: int = field(default=0, init=False)
    lost: int = field(default=0, init=False)
    last_error: Optional[KafkaError] = field(default=None, init=False)
    started: float = field(default_factory=time.monotonic, init=False)
    _fresh_metadata: bool = field(default=False, init=False)
    _timer: Any = field(default=None, init=False)


class CallError(Exception):
    """Raised by a :attr:`Call.build` or handler: fail the call with ``error``."""

    def __init__(self, error: KafkaError) -> None:
        super().__init__(error.str())
        self.error = error


#: coordinators kept by a CallRunner (groups and transactional ids it addressed)
MAX_COORDINATORS = 1000


class CallRunner:
    """Routes and retries :class:`Call` objects over one client's :class:`Cluster`."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.io = cluster.io
        config = cluster.config
        self.log = config.logger_for(_log.name)
        self.backoff = config["retry.backoff.ms"] / 1000.0
        self.backoff_max = config["retry.backoff.max.ms"] / 1000.0
        self.request_timeout = cluster.settings.request_timeout
        #: (key type, key) -> coordinator node id
        self.coordinators: Dict[Tuple[int, str], int] = {}
        self._finding: Dict[Tuple[int, str], List[Call]] = {}
        self._metadata_waiters: Optional[List[Callable[[Optional[KafkaError]], None]]] = None
        self._rng = random.Random()
        cluster.on_broker_state.append(self._on_broker_state)

    def _on_broker_state(self, conn: BrokerConnection, state: str,
                         error: Optional[KafkaError]) -> None:
        """A connection failed (lost, or refused while connecting): the controller and
        the coordinators it led to are looked up again by the next attempt of each call
        waiting for them. Else a call to a controller or coordinator whose broker went
        away (and with it the role) would wait for that broker's connection until its
        deadline, never asking who has the role now."""
        if error is None:
            return
        node = self.cluster.broker_id(conn)
        md = self.cluster.metadata
        if node >= 0 and md.controller_id == node:
            md.controller_id = -1     # the same for the controller: the next call asks
            self.log.debug("controller on broker %d: connection failed (%s), looked up "
                           "again", node, error.str())
        for key in [k for k, n in self.coordinators.items() if n == node]:
            del self.coordinators[key]
            self.log.debug("coordinator %s on broker %d: connection failed (%s), looked up "
                           "again", key, node, error.str())

    # -- submitting ----------------------------------------------------------------------
    def submit(self, call: Call) -> None:
        """Start a call (I/O thread)."""
        call._timer = self.io.call_at(call.deadline, self._expire, call)
        self._attempt(call)

    def _finish(self, call: Call, error: Optional[KafkaError]) -> None:
        """End a call: with ``error``, through its on_failure."""
        if call.done:
            return
        call.done = True
        self.cluster.cancel_retry(call)
        if call._timer is not None:
            call._timer.cancel()
        if error is not None:
            try:
                call.on_failure(error)
            except Exception:
                self.log.exception("%s: failure handler raised", call.name)

    def _expire(self, call: Call) -> None:
        if call.done:
            return
        last = call.last_error
        refused = self.cluster._refused_since(call.started, ending=True) \
            if last is None else None
        recent = self.cluster.last_connection_error
        if last is not None and last.code() != KafkaError._TIMED_OUT:
            # The error that kept it retrying says more than "timed out".
            error = KafkaError(last.code(), f"{call.name} to {call.target!r}: {last.str()} "
                               f"(still failing when the request timed out)",
                               retriable=last.retriable())
        elif refused is not None:
            # No broker would let it in (wrong credentials, TLS): that, not "timed out".
            error = KafkaError(refused.code(), f"{call.name} to {call.target!r}: "
                               f"{refused.str()} (no connection could be made before the "
                               f"request timed out)")
        elif last is None and recent is not None and recent[0] >= call.started:
            error = client_error(KafkaError._TIMED_OUT,
                                 f"{call.name} to {call.target!r} timed out (a connection "
                                 f"failed meanwhile: {recent[1].str()})")
        else:
            error = client_error(KafkaError._TIMED_OUT,
                               f"{call.name} to {call.target!r} timed out"
                               + ("" if last is None else f": {last.str()}"))
        self._finish(call, error)

    def _retry(self, call: Call, error: KafkaError, moved: bool = False) -> None:
        """Try again after the backoff (``moved``: look the target up again first)."""
        call.last_error = error
        call._fresh_metadata = False  # a lookup the retry needs must be answered anew
        if moved:
            self._forget_target(call.target)
        delay = retry_delay(self.backoff, self.backoff_max, call.tries + 1, self._rng)
        call.tries += 1
        if time.monotonic() + delay >= call.deadline:
            self._expire(call)
            return
        self.io.call_later(delay, self._attempt, call)

    # -- routing -------------------------------------------------------------------------
    def _forget_target(self, target: Any) -> None:
        if target is CONTROLLER:
            self.cluster.metadata.controller_id = -1
        elif isinstance(target, Coordinator):
            self.coordinators.pop((target.key_type, target.key), None)

    def _attempt(self, call: Call) -> None:
        self.cluster.cancel_retry(call)
        if call.done:
            return
        now = time.monotonic()
        if now >= call.deadline:
            self._expire(call)
            return
        node = self._node_for(call)
        if node is None:
            return  # a lookup is under way; it calls _attempt again
        if node == -1:
            conn = self.cluster.ready_connection(now)
        else:
            conn = self.cluster.ensure_connected(node)
            if conn is None:  # left the metadata meanwhile
                self._lookup_metadata(call)
                return
            if call.reroute is not None and conn.state == DISCONNECTED and \
                    conn.connect_count:
                # Refused, and in its reconnect backoff: the leader may have moved.
                self._give_back(call, client_error(
                    KafkaError._TRANSPORT, f"{call.name}: broker {node} cannot be reached"),
                    lost=False)
                return
        if conn is None or conn.state != READY:
            if conn is not None and conn.connect_count and conn.last_error is not None:
                call.last_error = conn.last_error   # what a timeout then says
            self.cluster.retry_when_ready(call, min(CONNECT_POLL_S, call.deadline - now),
                                          lambda: self._attempt(call))
            return
        self._send(call, conn)

    def _node_for(self, call: Call) -> Optional[int]:
        """The node id the call goes to (-1: any), or None while it is being looked up
        (the lookup calls :meth:`_attempt` again, or fails the call)."""
        target = call.target
        md = self.cluster.metadata
        if target is ANY_BROKER:
            return -1
        if target is CONTROLLER:
            if md.controller_id >= 0 and md.controller_id in md.brokers:
                return md.controller_id
            if call._fresh_metadata:  # none right now (an election?): ask again later
                self._retry(call, client_error(
                    KafkaError._WAIT_COORD,
                    f"{call.name}: the cluster metadata names no controller"))
                return None
            self._lookup_metadata(call)
            return None
        if isinstance(target, Broker):
            if target.node_id in md.brokers:
                return target.node_id
            if call._fresh_metadata:
                known = ", ".join(str(n) for n in sorted(md.brokers)) or "none"
                self._finish(call, client_error(
                    KafkaError._UNKNOWN_BROKER,
                    f"{call.name}: broker {target.node_id} is not in the cluster "
                    f"(brokers: {known})"))
                return None
            self._lookup_metadata(call)
            return None
        if isinstance(target, Coordinator):
            node = self.coordinators.get((target.key_type, target.key))
            if node is not None:
                return node
            self._find_coordinator(call, target)
            return None
        raise TypeError(f"unknown call target {target!r}")

    def _lookup_metadata(self, call: Call) -> None:
        def then(error: Optional[KafkaError]) -> None:
            call._fresh_metadata = True
            if error is not None and not error.retriable():
                self._finish(call, error)
            elif error is not None:
                self._retry(call, error)
            else:
                self._attempt(call)

        self.refresh_metadata(then, call.deadline)

    def refresh_metadata(self, then: Callable[[Optional[KafkaError]], None],
                         deadline: float, topics: Optional[List[str]] = None) -> None:
        """Ask for brokers and controller (and ``topics``, when given) and run
        ``then(error)`` once the cache holds the answer. Requests without topics are
        shared by everyone waiting at the time. ``error`` is _TIMED_OUT when no broker
        answered before ``deadline``."""
        # A request may outlive this caller's deadline (see below): the caller gets
        # _TIMED_OUT at its own deadline, and the answer coming later is not its.
        answered = [False]

        def once(error: Optional[KafkaError]) -> None:
            if not answered[0]:
                answered[0] = True
                timer.cancel()
                then(error)

        timer = self.io.call_at(deadline, once, client_error(
            KafkaError._TIMED_OUT, "no broker answered the Metadata request in time"))
        # Bounded by the socket timeout, not one caller's deadline: a short deadline
        # must not close a connection others are waiting on (as librdkafka's).
        bound = max(deadline, time.monotonic() + self.request_timeout)
        if topics:
            def one(resp: Any, err: Optional[KafkaError], conn: Any) -> None:
                once(_metadata_outcome(resp, err))

            self.cluster.request_metadata(sorted(set(topics)), one, bound)
            return
        if self._metadata_waiters is not None:
            self._metadata_waiters.append(once)
            return
        self._metadata_waiters = [once]

        def shared(resp: Any, err: Optional[KafkaError], conn: Any) -> None:
            waiters, self._metadata_waiters = self._metadata_waiters or [], None
            error = _metadata_outcome(resp, err)
            for fn in waiters:
                fn(error)

        # Waiters that give up earlier expire by their own timers (``once`` above).
        self.cluster.request_metadata([], shared, bound)

    def _find_coordinator(self, call: Call, target: Coordinator) -> None:
        key = (int(target.key_type), target.key)
        waiting = self._finding.get(key)
        if waiting is not None:
            waiting.append(call)
            return
        self._finding[key] = [call]

        def wake(error: Optional[KafkaError]) -> None:
            for waiter in self._finding.pop(key, []):
                if error is None:
                    self._attempt(waiter)
                elif error.retriable():
                    self._retry(waiter, error)
                else:
                    self._finish(waiter, error)

        def build(version: int) -> Any:
            if version >= 4:
                return FindCoordinatorRequest(key_type=target.key_type,
                                              coordinator_keys=[target.key])
            return FindCoordinatorRequest(key=target.key, key_type=target.key_type)

        def on_response(resp: Any, conn: BrokerConnection) -> Optional[KafkaError]:
            code, msg, node, host, port = coordinator_answer(resp, target.key)
            if code:
                error = broker_error(code, msg, f"FindCoordinator for {target!r}")
                if error.retriable():
                    return error
                wake(error)
                return None
            self.cluster.metadata.broker_named(node, host, port, time.monotonic())
            coordinators = self.coordinators
            coordinators.pop(key, None)
            coordinators[key] = node          # the newest last: the oldest goes first
            if len(coordinators) > MAX_COORDINATORS:
                # A long-lived admin client walking many groups (ephemeral ones, ids
                # from user input): a bounded cache, the least recently found dropped
                # (looked up again if needed), as librdkafka's coordinator cache expires.
                del coordinators[next(iter(coordinators))]
            self.log.debug("%r is broker %d (%s:%d)", target, node, host, port)
            wake(None)
            return None

        # The lookup lives as long as the longest-waiting call may need it.
        self.submit(Call("FindCoordinator", ApiKey.FIND_COORDINATOR, ANY_BROKER,
                         max(call.deadline, time.monotonic() + self.request_timeout),
                         build, on_response, wake,
                         min_version=1 if target.key_type != CoordinatorType.GROUP else 0))

    # -- sending -------------------------------------------------------------------------
    def _send(self, call: Call, conn: BrokerConnection) -> None:
        version = self._version(call, conn)
        if version is None:
            return
        try:
            request = call.build(version)
        except CallError as exc:
            self._finish(call, exc.error)
            return

        def answered(resp: Any, err: Optional[KafkaError]) -> None:
            if call.done:
                return
            if err is not None and err.code() in NEVER_SENT and not err.retriable():
                # Sending it again cannot help (one that timed out in the queue: lost)
                self._finish(call, KafkaError(err.code(), f"{call.name} to {call.target!r}: "
                                              f"{err.str()}"))
                return
            if err is not None:
                self._lost(call, err)
                return
            try:
                again = call.on_response(resp, conn)
            except CallError as exc:
                self._finish(call, exc.error)
                return
            except Exception as exc:
                self.log.exception("%s: response handler raised", call.name)
                self._finish(call, client_error(KafkaError._FAIL,
                                              f"{call.name}: cannot handle the response: "
                                              f"{exc}"))
                return
            if again is None:
                self._finish(call, None)
            else:
                self._retry(call, again, moved=again.code() in _moved_codes(call.target))

        # The call's own deadline fails only the call (its timer): the request keeps the
        # connection's socket timeout, as librdkafka's admin requests do, so that a call
        # given a short timeout does not close a connection other calls are waiting on.
        conn.send(request, answered, version=version,
                  timeout=max(call.deadline - time.monotonic(), self.request_timeout))

    def _version(self, call: Call, conn: BrokerConnection) -> Optional[int]:
        """The version to use with ``conn``, or None after failing the call."""
        negotiated = conn.version_for(call.api_key)
        name = api_info(call.api_key).name
        if negotiated is None:
            self._finish(call, client_error(
                KafkaError._UNSUPPORTED_FEATURE,
                f"{call.name}: broker {conn.node_id} ({conn.host}:{conn.port}) does not "
                f"support the {name} API"))
            return None
        version = negotiated if call.max_version is None else min(negotiated,
                                                                  call.max_version)
        if version < call.min_version:
            self._finish(call, client_error(
                KafkaError._UNSUPPORTED_FEATURE,
                f"{call.name}: needs {name} version {call.min_version} or later; broker "
                f"{conn.node_id} ({conn.host}:{conn.port}) supports up to {negotiated}"))
            return None
        return version

    def _lost(self, call: Call, error: KafkaError) -> None:
        """The request got no answer: its connection closed, or it timed out."""
        if time.monotonic() >= call.deadline:
            call.last_error = error
            self._expire(call)
            return
        if call.reroute is not None:
            self._give_back(call, error, lost=True)
            return
        call.lost += 1
        if call.lost > MAX_LOST:
            self._finish(call, client_error(
                error.code(), f"{call.name} to {call.target!r}: {error.str()} (the request "
                f"was lost with its connection {call.lost} times)"))
            return
        # The broker may have gone away with the role it held: look it up again.
        self._retry(call, error, moved=True)

    def _give_back(self, call: Call, error: KafkaError, lost: bool) -> None:
        """End a :attr:`Call.reroute` call whose broker cannot be reached: its caller
        routes it again."""
        call.last_error = error
        self._finish(call, None)
        assert call.reroute is not None
        call.reroute(error, lost)

    def submit_to_leaders(self, name: str, api_key: ApiKey, keys: Iterable[PartitionKey],
                          deadline: float,
                          build: Callable[[int, List[PartitionKey]], Any],
                          parse: Callable[[Any], Dict[PartitionKey, Tuple[int, Any]]],
                          finish: Callable[[PartitionKey, Any, Optional[KafkaError]], None],
                          min_version: int = 0, max_version: Optional[int] = None) -> None:
        """Send a per-partition request to each partition's leader.

        The leaders come from a Metadata request for the topics concerned (never
        auto-creating them). ``build(version, keys)`` makes one leader's request,
        ``parse(response)`` returns ``{key: (error_code, result)}``; ``finish(key,
        result, error)`` runs once per key. Leader errors re-route the partition after a
        fresh metadata answer; a topic or partition the metadata does not know fails at
        once with UNKNOWN_TOPIC_OR_PART, as librdkafka does.
        """
        _LeaderFanout(self, name, api_key, list(dict.fromkeys(keys)), deadline, build, parse,
                      finish, min_version, max_version).route()


def _metadata_outcome(resp: Any, err: Optional[KafkaError]) -> Optional[KafkaError]:
    """A :meth:`Cluster.request_metadata` answer as an error (None: the cache has it)."""
    if err is None and resp is None:
        return client_error(KafkaError._TIMED_OUT, "no broker answered the Metadata request "
                          "in time")
    return err


def _moved_codes(target: Any) -> frozenset:
    if target is CONTROLLER:
        return _CONTROLLER_MOVED
    if isinstance(target, Coordinator):
        return _COORDINATOR_MOVED
    return frozenset()


def broker_error(code: int, message: Optional[str], what: str) -> KafkaError:
    """A broker error code as a KafkaError whose text says what failed and carries the
    broker's own message when it sent one (a code below -1 is UNKNOWN_SERVER_ERROR:
    :func:`~kafka_client.errors.broker_code`)."""
    code = broker_code(code)
    base = client_error(code)
    text = message if message else base.str()
    return client_error(code, f"{what}: {text}")


def group_by_topic(keys: Iterable[PartitionKey]) -> Dict[str, List[int]]:
    """``{topic: [partition, ...]}`` in first-seen order."""
    out: Dict[str, List[int]] = {}
    for topic, partition in keys:
        out.setdefault(topic, []).append(partition)
    return out


class _LeaderFanout:
    """One :meth:`CallRunner.submit_to_leaders`: partitions waiting for a leader, and one
    :class:`Call` per leader for those routed."""

    def __init__(self, runner: CallRunner, name: str, api_key: ApiKey,
                 keys: List[PartitionKey], deadline: float,
                 build: Callable[[int, List[PartitionKey]], Any],
                 parse: Callable[[Any], Dict[PartitionKey, Tuple[int, Any]]],
                 finish: Callable[[PartitionKey, Any, Optional[KafkaError]], None],
                 min_version: int, max_version: Optional[int]) -> None:
        self.runner = runner
        self.name = name
        self.api_key = api_key
        self.waiting: List[PartitionKey] = keys      # need a (new) leader
        self.deadline = deadline
        self.build = build
        self.parse = parse
        self._finish = finish
        self.min_version = min_version
        self.max_version = max_version
        self.finished: Set[PartitionKey] = set()
        self.rounds = 0
        self.lost = 0          # requests lost with their connection
        self.last_error: Optional[KafkaError] = None
        self._scheduled = False

    def finish(self, key: PartitionKey, result: Any, error: Optional[KafkaError]) -> None:
        if key in self.finished:
            return
        self.finished.add(key)
        try:
            self._finish(key, result, error)
        except Exception:
            self.runner.log.exception("%s: result handler raised", self.name)

    def route(self) -> None:
        self._scheduled = False
        if not self.waiting:
            return
        topics = sorted({t for t, _ in self.waiting})
        self.runner.refresh_metadata(self._routed, self.deadline, topics)

    def _again(self, error: KafkaError) -> None:
        """Some partitions wait for a leader: route them again after the backoff."""
        if error.code() != KafkaError._TIMED_OUT or self.last_error is None:
            # A metadata refresh cut off by the call's own deadline is not why these
            # partitions failed: the error of the rounds before (no leader) is.
            self.last_error = error
        if self._scheduled:
            return
        r = self.runner
        delay = retry_delay(r.backoff, r.backoff_max, self.rounds + 1, r._rng)
        self.rounds += 1
        if time.monotonic() + delay >= self.deadline:
            self._give_up()
            return
        self._scheduled = True
        r.io.call_later(delay, self.route)

    def _give_up(self) -> None:
        last = self.last_error
        for key in self.waiting:
            text = f"{self.name} {key[0]} [{key[1]}]: no leader before the request timed out"
            if last is not None:
                text += f" (last error: {last.str()})"
            self.finish(key, None, client_error(
                last.code() if last is not None else KafkaError._TIMED_OUT, text))
        self.waiting = []

    def _routed(self, error: Optional[KafkaError]) -> None:
        if error is not None:
            if error.retriable():
                self._again(error)
            else:
                waiting, self.waiting = self.waiting, []
                for key in waiting:
                    self.finish(key, None, error)
            return
        md = self.runner.cluster.metadata
        by_leader: Dict[int, List[PartitionKey]] = {}
        still: List[PartitionKey] = []
        for key in self.waiting:
            topic, partition = key
            info = md.topics.get(topic)
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if info is None else info.error
            if code and code != ErrorCode.LEADER_NOT_AVAILABLE:
                self.finish(key, None, broker_error(code, None, f"{self.name} {topic}"))
            elif info is not None and not 0 <= partition < info.partition_count and not code:
                self.finish(key, None, client_error(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"{self.name} {topic} [{partition}]: the topic has "
                    f"{info.partition_count} partitions"))
            else:
                leader = -1 if info is None or code else info.leaders[partition]
                if leader >= 0 and leader in md.brokers:
                    by_leader.setdefault(leader, []).append(key)
                else:
                    still.append(key)
        self.waiting = still
        for leader, keys in by_leader.items():
            self._send(leader, keys)
        if still:
            self._again(client_error(ErrorCode.LEADER_NOT_AVAILABLE,
                                   f"{self.name}: {len(still)} partition(s) have no leader"))

    def _send(self, leader: int, keys: List[PartitionKey]) -> None:
        def on_response(resp: Any, conn: BrokerConnection) -> Optional[KafkaError]:
            answers = self.parse(resp)
            moved: Optional[KafkaError] = None
            for key in keys:
                answer = answers.get(key)
                if answer is None:
                    self.finish(key, None, client_error(
                        KafkaError._BAD_MSG,
                        f"{self.name}: broker {leader} did not answer for "
                        f"{key[0]} [{key[1]}]"))
                    continue
                code, result = answer
                error = broker_error(code, None, f"{self.name} {key[0]} [{key[1]}]") \
                    if code else None
                if error is None:
                    self.finish(key, result, None)
                elif code in _LEADER_MOVED or code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION \
                        or error.retriable():
                    # Routed again, as the Java client retries any retriable error of a
                    # partition (a moved leader, REQUEST_TIMED_OUT, ...).
                    moved = error
                    self.waiting.append(key)
                else:
                    self.finish(key, result, error)
            if moved is not None:
                self._again(moved)
            return None

        def on_failure(error: KafkaError) -> None:
            for key in keys:
                self.finish(key, None, error)

        def reroute(error: KafkaError, lost: bool) -> None:
            """The leader's broker could not be reached: route again, unless the
            request was lost with its connection more than MAX_LOST times (a broker
            that drops every such request)."""
            self.lost += lost
            if self.lost > MAX_LOST:
                on_failure(client_error(error.code(), f"{self.name}: {error.str()} (the "
                                        f"request was lost with its connection "
                                        f"{self.lost} times)"))
                return
            self.waiting.extend(keys)
            self._again(error)

        self.runner.submit(Call(self.name, self.api_key, Broker(leader), self.deadline,
                                lambda version: self.build(version, keys), on_response,
                                on_failure, self.min_version, self.max_version,
                                reroute=reroute))
