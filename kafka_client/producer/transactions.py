"""The transactional producer: librdkafka's transaction state machine and the
transaction protocol (KIP-98, KIP-360, KIP-447).

:class:`TransactionManager` is built by the ``Producer`` when ``transactional.id`` is set.
The application calls the ``Producer`` methods (``init_transactions()``,
``begin_transaction()``, ``send_offsets_to_transaction()``, ``commit_transaction()``,
``abort_transaction()``), which call the methods here of the same names; the I/O thread
calls :meth:`TransactionManager.tick` (from the sender) and the error hooks.

The states and their order are librdkafka's::

    Init -> WaitPID -> ReadyNotAcked -> Ready -> InTransaction
        InTransaction -> BeginCommit -> CommittingTransaction -> CommitNotAcked -> Ready
        InTransaction | AbortableError -> BeginAbort -> AbortingTransaction
                                                     -> AbortedNotAcked -> Ready
        InTransaction | BeginCommit | CommittingTransaction -> AbortableError
        any -> FatalError

The ``...NotAcked`` states make a call that timed out resumable: the work goes on in the
background, and calling the same API again waits for it (or collects its outcome)
instead of starting over. A call of another API meanwhile is refused with ``_CONFLICT``.

The protocol, on the I/O thread:

* ``init_transactions()``: FindCoordinator (key type TRANSACTION) for the transactional
  id, then InitProducerId with the transactional id and ``transaction.timeout.ms``: the
  coordinator fences older instances of the same id and aborts what they left open.
* while in a transaction, every partition that has a batch queued is registered with
  AddPartitionsToTxn (one request at a time) before its first batch goes out: the
  accumulator holds back batches of partitions not in :attr:`Accumulator.txn_partitions`.
* ``send_offsets_to_transaction()``: AddOffsetsToTxn (the group's offsets become part of
  the transaction) to the transaction coordinator, then TxnOffsetCommit with the
  consumer's group metadata (generation, member id, instance id: KIP-447) to the group
  coordinator.
* ``commit_transaction()`` / ``abort_transaction()``: EndTxn. Commit first flushes
  (every message delivered); abort first purges what is queued and waits for what is in
  flight.
* Every request goes through the client's :class:`~kafka_client._cluster.calls.CallRunner`
  (as the admin client's do): coordinator moves (NOT_COORDINATOR,
  COORDINATOR_NOT_AVAILABLE, a lost connection) look the coordinator up again; retriable
  errors (COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS, timeouts) are retried
  after ``retry.backoff.ms`` (doubling); a step that cannot finish in time is left for
  the application to resume by calling the API again.

Errors are classified as librdkafka does: *fatal* (fenced by a newer instance:
PRODUCER_FENCED or INVALID_PRODUCER_EPOCH, reported as ``_FENCED``; authorization
failures; INVALID_TXN_STATE, except from InitProducerId, which librdkafka retries until
``init_transactions()``'s timeout): the producer can do nothing more; *abortable*
(``txn_requires_abort()``: a message failed, the producer id became unknown, an offset
commit was refused): the application calls ``abort_transaction()`` and goes on; and
*retriable* (``retriable()``: the call timed out and may be called again).
"""
from __future__ import annotations

import contextlib
import enum
import logging
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple

from kafka_client._backoff import retry_delay
from kafka_client._cluster.calls import (
    Call,
    CallError,
    CallRunner,
    Coordinator,
)
from kafka_client._common import deadline_after, wait_limit
from kafka_client.errors import KafkaError, KafkaException, broker_code, client_error
from kafka_client.producer.idempotence import has_producer_id
from kafka_client.types import TopicPartition, metadata_to_commit
from kafka_proto.enums import CoordinatorType
from kafka_proto.errors import ErrorCode
from kafka_proto.messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    ApiKey,
    EndTxnRequest,
    InitProducerIdRequest,
    TxnOffsetCommitRequest,
)

__all__ = ["TransactionManager", "TxnState", "fenced_error"]

_log = logging.getLogger("kafka_client.producer.transactions")

#: Clients use AddPartitionsToTxn v0-3 (v4+ are for brokers verifying partitions).
_ADD_PARTITIONS_MAX_VERSION = 3
#: EndTxn v5 (KIP-890 transactions v2) bumps the epoch at every commit; not spoken here.
_END_TXN_MAX_VERSION = 4
#: Retry backoff after CONCURRENT_TRANSACTIONS (the previous transaction is still being
#: completed by the coordinator; usually a few milliseconds), as librdkafka waits.
_CONCURRENT_BACKOFF = 0.02


class TxnState(enum.Enum):
    """librdkafka's transaction states (its names, shown in error messages)."""

    INIT = "Init"
    WAIT_PID = "WaitPID"
    READY_NOT_ACKED = "ReadyNotAcked"
    READY = "Ready"
    IN_TRANSACTION = "InTransaction"
    BEGIN_COMMIT = "BeginCommit"
    COMMITTING = "CommittingTransaction"
    COMMIT_NOT_ACKED = "CommitNotAcked"
    BEGIN_ABORT = "BeginAbort"
    ABORTING = "AbortingTransaction"
    ABORT_NOT_ACKED = "AbortedNotAcked"
    ABORTABLE_ERROR = "AbortableError"
    FATAL_ERROR = "FatalError"


#: States from which each API may start (or resume).
_API_STATES: Dict[str, Tuple[TxnState, ...]] = {
    "init_transactions": (TxnState.INIT, TxnState.WAIT_PID, TxnState.READY_NOT_ACKED),
    "begin_transaction": (TxnState.READY,),
    "send_offsets_to_transaction": (TxnState.IN_TRANSACTION,),
    "commit_transaction": (TxnState.IN_TRANSACTION, TxnState.BEGIN_COMMIT,
                           TxnState.COMMITTING, TxnState.COMMIT_NOT_ACKED),
    "abort_transaction": (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR,
                          TxnState.BEGIN_ABORT, TxnState.ABORTING, TxnState.ABORT_NOT_ACKED),
}

#: What the application probably missed, per state, for the _STATE error messages.
_STATE_HINTS = {
    TxnState.INIT: "call init_transactions() first",
    TxnState.WAIT_PID: "init_transactions() has not completed: call it again",
    TxnState.READY_NOT_ACKED: "init_transactions() has not returned success yet: call it "
                              "again",
    TxnState.READY: "no transaction is open: call begin_transaction() first",
    TxnState.IN_TRANSACTION: "a transaction is already open",
    TxnState.BEGIN_COMMIT: "the transaction is being committed: call commit_transaction() "
                           "again",
    TxnState.COMMITTING: "the transaction is being committed: call commit_transaction() "
                         "again",
    TxnState.COMMIT_NOT_ACKED: "the transaction is committed: call commit_transaction() "
                               "again to complete it",
    TxnState.BEGIN_ABORT: "the transaction is being aborted: call abort_transaction() again",
    TxnState.ABORTING: "the transaction is being aborted: call abort_transaction() again",
    TxnState.ABORT_NOT_ACKED: "the transaction is aborted: call abort_transaction() again "
                              "to complete it",
}

# -- how the coordinator's answers are read (librdkafka's tables) -------------------------

#: The coordinator moved or is not there yet: look it up again, retry.
_COORDINATOR_MOVED = frozenset((ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE))
#: Retry (same coordinator) after a backoff.
_RETRY = frozenset((ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS,
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.REQUEST_TIMED_OUT))
#: This instance is fenced by a newer one with the same transactional.id.
_FENCED = frozenset((ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH,
                     ErrorCode.TRANSACTION_COORDINATOR_FENCED))
#: The producer can do nothing more.
_FATAL = _FENCED | frozenset((ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                              ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                              ErrorCode.INVALID_TXN_STATE,
                              ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
                              ErrorCode.INVALID_TRANSACTION_TIMEOUT))
#: What InitProducerId answers fatally, as librdkafka reads it (its other errors are retried
#: until the call's deadline: INVALID_TXN_STATE when the coordinator is still ending a
#: transaction of the previous instance, TRANSACTION_COORDINATOR_FENCED, ...).
_INIT_PID_FATAL = frozenset((ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH,
                             ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                             ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                             ErrorCode.INVALID_TRANSACTION_TIMEOUT))
#: The coordinator lost the producer id: the transaction is aborted with an epoch bump.
_NEEDS_BUMP = frozenset((ErrorCode.UNKNOWN_PRODUCER_ID, ErrorCode.INVALID_PRODUCER_ID_MAPPING))


def fenced_error(code: int, what: str) -> KafkaError:
    """The fatal ``_FENCED`` error librdkafka reports for every fencing code."""
    return client_error(KafkaError._FENCED,
                      f"{what}: {client_error(code).name()}: this producer was fenced by a newer "
                      f"instance with the same transactional.id", fatal=True)


def fatal_produce_error(fatal: KafkaError) -> KafkaError:
    """What produce() raises once the producer has a fatal error: ``_FATAL``, itself not
    flagged fatal, as confluent-kafka 2.16.1 raises it (librdkafka's produce() fails with
    ERR__FATAL); the fatal error itself is raised by commit/abort/begin and, once, by the
    poll() or flush() that serves it."""
    return client_error(KafkaError._FATAL, f"Unable to produce message: Local: Fatal error: "
                        f"{fatal.str()}")


class _ApiCall:
    """The application's current transactional API call: its name and the result the
    I/O thread sets for it (kept for a later call when nobody waits any more)."""

    __slots__ = ("name", "calling", "thread", "done", "error")

    def __init__(self, name: str) -> None:
        self.name = name
        self.calling = False
        self.thread = 0              # the thread in the call while ``calling``
        self.done = threading.Event()
        self.error: Optional[KafkaError] = None


class TransactionManager:
    """A transactional producer's state and its conversation with the coordinators.

    Application-thread methods wait for the I/O thread's part; everything shared is
    changed under :attr:`lock`. The sender is attached by :meth:`attach`.
    """

    def __init__(self, config: Any, io: Any, cluster: Any, idem: Any, acc: Any) -> None:
        self.log = config.logger_for(_log.name)
        self.transactional_id: str = config["transactional.id"]
        self.timeout_ms: int = config["transaction.timeout.ms"]
        self.backoff = config["retry.backoff.ms"] / 1000.0
        self.backoff_max = config["retry.backoff.max.ms"] / 1000.0
        self.request_timeout = config["socket.timeout.ms"] / 1000.0
        self.io = io
        self.cluster = cluster
        self.idem = idem
        self.acc = acc
        self.sender: Any = None
        self.lock = threading.Lock()
        self.state = TxnState.INIT
        self.state_since = time.monotonic()
        # produce() is refused until a transaction begins; _set_state tells the
        # accumulator at every change (its refusal field is what produce() tests).
        acc.refuse_produce(self.produce_refused)
        #: the error that made the transaction abortable, or the fatal one
        self.error: Optional[KafkaError] = None
        #: the coordinator must bump the epoch before the next transaction (KIP-360)
        self.needs_bump = False
        self._api: Optional[_ApiCall] = None
        self._last_init_error: Optional[KafkaError] = None
        # -- the open transaction --
        self._pending: Set[Any] = set()          # partitions to register
        self._registering: Set[Any] = set()      # partitions in the AddPartitionsToTxn
        self._register_after = 0.0               # its retry backoff
        #: AddPartitionsToTxn failures in a row: the waits double (KIP-580)
        self._register_failures = 0
        #: the coordinator may have seen this transaction's AddPartitionsToTxn / its
        #: AddOffsetsToTxn (one went out, and no answer refused it): with neither, commit
        #: and abort send no EndTxn. One flag each: the two can be out at once, and the
        #: refusal of one says nothing of the other (a refused AddPartitionsToTxn made
        #: an abort forget the offsets added meanwhile: the transaction stayed open at
        #: the coordinator, the group's offsets unstable, until it timed out and fenced).
        self._partitions_seen = False
        self._offsets_seen = False
        #: (monotonic) when this transaction's last AddOffsetsToTxn or TxnOffsetCommit
        #: went out, unanswered; None: none is out (see _finish_abort)
        self._offsets_out: Optional[float] = None
        #: an abort waits for the answer to a request out (see _finish_abort)
        self._abort_waits = False
        self.delivery_failures = 0               # messages that failed in this transaction
        #: the last send_offsets_to_transaction() of this transaction failed with this
        #: (None: none did, or the last succeeded)
        self._offsets_failure: Optional[KafkaError] = None
        #: counts transactions, so a late answer to an earlier one is told apart
        self._txn_number = 0
        #: requests routed to the coordinators (found with FindCoordinator), retried
        self.runner = CallRunner(cluster)

    def attach(self, sender: Any) -> None:
        """The sender this manager purges and re-sequences through (I/O thread side)."""
        self.sender = sender

    # ================================================================ application thread
    def init_transactions(self, timeout: Optional[float]) -> None:
        """Get the producer id and epoch of the transactional id from its coordinator,
        fencing older instances; resumable after a timeout."""
        deadline = deadline_after(timeout)  # TypeError for what is not a number
        if deadline == float("inf"):
            # As librdkafka: no coordinator times this call out, so "forever" is capped.
            deadline = time.monotonic() + 2 * self.timeout_ms / 1000.0
        with self._calling("init_transactions") as call:
            with self.lock:
                error = self._require(call.name)
                if error is None and self.state == TxnState.INIT:
                    self._set_state(TxnState.WAIT_PID)
                    self._last_init_error = None
                    self.io.call_soon(self._init_producer_id)
            if error is not None:
                self._end_api(call, error, resumable=False)
            if self.state != TxnState.READY_NOT_ACKED:
                error = self._wait(call, deadline)
                if error is not None and error.code() == KafkaError._TIMED_OUT \
                        and self._last_init_error is not None:
                    last = self._last_init_error
                    error = KafkaError(last.code(), f"Failed to initialize Producer ID: "
                                       f"{last.str()}", retriable=True)
                if error is not None:
                    self._end_api(call, error, resumable=True)
            with self.lock:
                error = self._require_exactly(TxnState.READY_NOT_ACKED)
                if error is None:
                    self._set_state(TxnState.READY)
            self._end_api(call, error, resumable=False)

    def begin_transaction(self) -> None:
        """Open a transaction: produce() is allowed until commit or abort."""
        with self._calling("begin_transaction") as call:
            with self.lock:
                error = self._require(call.name)
                if error is None:
                    self._pending.clear()
                    self._registering = set()
                    self._coordinator_forgets()
                    self._offsets_out = None
                    self._abort_waits = False
                    self.delivery_failures = 0
                    self._offsets_failure = None
                    self.error = None
                    self._txn_number += 1
                    self.acc.txn_partitions = set()
                    self._set_state(TxnState.IN_TRANSACTION)
            self._end_api(call, error, resumable=False)

    def send_offsets_to_transaction(self, offsets: Sequence[TopicPartition],
                                    group_metadata: Any, timeout: Optional[float]) -> None:
        """Commit the consumer's ``offsets`` as part of the transaction (AddOffsetsToTxn,
        then TxnOffsetCommit to the group coordinator with ``group_metadata``)."""
        valid = _check_offsets_args(offsets, group_metadata)
        deadline = self._capped_deadline(timeout)
        with self._calling("send_offsets_to_transaction") as call:
            with self.lock:
                error = self._require(call.name)
            if error is None and valid:
                self._expect_result(call)
                self.io.call_soon(self._add_offsets, valid, group_metadata, deadline, call)
                error = self._wait(call, deadline + 1.0)  # the I/O side enforces the deadline
                # Until a call succeeds, the transaction may not commit: its output would
                # be committed without its input's offsets (read again after a restart).
                self._offsets_failure = error
            self._end_api(call, error, resumable=False)

    def commit_transaction(self, timeout: Optional[float],
                           flush: Callable[[Optional[float]], int]) -> None:
        """Flush, then commit (EndTxn); resumable after a timeout. ``flush`` is the
        producer's (it serves the delivery reports)."""
        deadline = deadline_after(timeout)
        with self._calling("commit_transaction") as call:
            with self.lock:
                error = self._require(call.name)
                if error is None and self.state == TxnState.IN_TRANSACTION:
                    self._set_state(TxnState.BEGIN_COMMIT)
            if error is not None:
                self._end_api(call, error, resumable=False)
            self._flush_or_raise(call, flush, deadline)
            with self.lock:
                state = self.state
                if state == TxnState.BEGIN_COMMIT:
                    unsent = self._offsets_failure
                    if unsent is not None:
                        self._abortable_locked(client_error(
                            unsent.code(), f"send_offsets_to_transaction() did not complete "
                            f"({unsent.str()}): the offsets are not in the transaction"),
                            bump=False)
                    elif self.delivery_failures:
                        self._abortable_locked(client_error(
                            KafkaError._INCONSISTENT,
                            f"{self.delivery_failures} message(s) failed delivery (see "
                            f"individual delivery reports)"), bump=False)
                    elif not self._coordinator_knows:
                        self._set_state(TxnState.COMMIT_NOT_ACKED)  # nothing to tell it
                    else:
                        self._set_state(TxnState.COMMITTING)
                        self._expect_result(call)
                        self.io.call_soon(self._end_txn, True)
                error = self._require(call.name)
            if error is None and self.state != TxnState.COMMIT_NOT_ACKED:
                error = self._wait(call, deadline)
            if error is not None:
                self._end_api(call, error, resumable=True)
            with self.lock:
                error = self._require_exactly(TxnState.COMMIT_NOT_ACKED)
                if error is None:
                    self._complete()
            self._end_api(call, error, resumable=False)

    def abort_transaction(self, timeout: Optional[float],
                          flush: Callable[[Optional[float]], int]) -> None:
        """Purge what is queued, wait for what is in flight, then abort (EndTxn); with an
        epoch bump if the producer id needs one. Resumable after a timeout."""
        deadline = deadline_after(timeout)
        with self._calling("abort_transaction") as call:
            start_abort = False
            with self.lock:
                error = self._require(call.name)
                if error is None and self.state in (TxnState.IN_TRANSACTION,
                                                    TxnState.ABORTABLE_ERROR):
                    self._set_state(TxnState.BEGIN_ABORT)
                    self._pending.clear()
                    start_abort = True
            if error is not None:
                self._end_api(call, error, resumable=False)
            if start_abort:
                self._run_on_io(self._purge_queued, deadline)
            self._flush_or_raise(call, flush, deadline)
            finish = False
            with self.lock:
                if self.state == TxnState.BEGIN_ABORT:
                    self._set_state(TxnState.ABORTING)
                    self._expect_result(call)
                    finish = True
                error = self._require(call.name)
            if finish:
                # Waited for (briefly, even past the deadline): a transaction the
                # coordinator never heard of ends there at once, as librdkafka ends it
                # (abort_transaction(0) of an empty transaction succeeds, not _TIMED_OUT)
                self._run_on_io(self._finish_abort, deadline)
            if error is None and self.state != TxnState.ABORT_NOT_ACKED:
                error = self._wait(call, deadline)
            if error is not None:
                self._end_api(call, error, resumable=True)
            with self.lock:
                error = self._require_exactly(TxnState.ABORT_NOT_ACKED)
                if error is None:
                    self._complete()
            self._end_api(call, error, resumable=False)

    def end_for_close(self, deadline: float, flush: Callable[[Optional[float]], int]
                      ) -> None:
        """The producer closes (up to ``deadline``): a call under way in another thread
        (a commit waiting for EndTxn) is waited for, so that it returns its real outcome
        rather than _DESTROY; a transaction still open is aborted, its queued messages
        purged, as librdkafka's and the Java client's close() do (its open transaction
        held read_committed readers back for transaction.timeout.ms, and close() sent its
        queued messages)."""
        me = threading.get_ident()
        while True:
            with self.lock:
                call = self._api
                busy = call is not None and call.calling and call.thread != me
                state = self.state
            if not busy:
                break
            if time.monotonic() >= deadline:
                return
            time.sleep(0.01)
        if state not in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR,
                         TxnState.BEGIN_ABORT, TxnState.ABORTING):
            return
        self.log.warning("producer closing in transaction state %s: aborting the "
                         "transaction", state.value)
        # At most transaction.timeout.ms: past it the coordinator aborts the transaction
        # itself (close(None) must not wait for ever for an unreachable coordinator).
        until = time.monotonic() + min(deadline - time.monotonic(), self.timeout_ms / 1000.0)
        raised: Optional[Exception] = None
        while True:
            try:
                self.abort_transaction(max(0.0, until - time.monotonic()), flush)
                break
            except KafkaException as exc:
                self.log.warning("aborting the transaction at close failed: %s",
                                 exc.args[0].str() if exc.args and isinstance(
                                     exc.args[0], KafkaError) else exc)
                break
            except Exception as exc:
                # A delivery callback raised in the abort's flush: the abort goes on (it
                # stopped before its EndTxn, leaving a registered transaction open at the
                # coordinator until transaction.timeout.ms), the exception after it.
                if raised is None:
                    raised = exc
                if time.monotonic() >= until:
                    break
        if raised is not None:
            raise raised

    @property
    def may_produce(self) -> bool:
        """produce() is allowed: only inside a transaction."""
        return self.state == TxnState.IN_TRANSACTION

    @property
    def sending(self) -> bool:
        """The open transaction's batches may (still) be sent: not aborting, no error."""
        return self.state in (TxnState.IN_TRANSACTION, TxnState.BEGIN_COMMIT) \
            and self.error is None

    def produce_refused(self) -> KafkaError:
        """Why produce() is refused now (it is allowed only inside a transaction)."""
        with self.lock:
            if self.state == TxnState.FATAL_ERROR and self.error is not None:
                return fatal_produce_error(self.error)
            if self.state == TxnState.ABORTABLE_ERROR and self.error is not None:
                # _STATE without flags, as confluent-kafka 2.16.1 raises it here (librdkafka
                # queues nothing outside the InTransaction state); the cause is named
                return client_error(KafkaError._STATE, f"Unable to produce message: the "
                                  f"transaction must be aborted: {self.error.str()}")
            hint = _STATE_HINTS.get(self.state, "")
            return client_error(KafkaError._STATE,
                              f"Unable to produce message in transaction state "
                              f"{self.state.value}: {hint or 'not in a transaction'}")

    # -- the API call bookkeeping (librdkafka's "current API") -----------------------
    @contextlib.contextmanager
    def _calling(self, name: str) -> Iterator[_ApiCall]:
        """One application call of ``name`` (see :meth:`_begin_api`). Interrupted by an
        exception other than its own result (a delivery callback raising in its flush,
        Ctrl-C while it waits), it stays the current call, to be resumed by calling it
        again (it was left "in progress": every later call was refused)."""
        call = self._begin_api(name)
        try:
            yield call
        except BaseException:
            with self.lock:
                call.calling = False
            raise

    def _begin_api(self, name: str) -> _ApiCall:
        with self.lock:
            call = self._api
            if call is not None and call.name != name:
                raise KafkaException(KafkaError(
                    KafkaError._CONFLICT,
                    f"Conflicting {call.name}() call is already in progress: call it again "
                    f"until it completes", retriable=True))
            if call is not None and call.calling:
                raise KafkaException(KafkaError(
                    KafkaError._PREV_IN_PROGRESS,
                    f"Simultaneous {name}() calls are not allowed", retriable=True))
            if call is None:
                call = self._api = _ApiCall(name)
            call.calling = True
            call.thread = threading.get_ident()
            return call

    def _end_api(self, call: _ApiCall, error: Optional[KafkaError], resumable: bool) -> None:
        """Return from an API call: raise ``error`` if any. A retriable error of a
        resumable call keeps the call current, to be resumed by calling it again."""
        with self.lock:
            call.calling = False
            # An error that needs an abort (or is fatal) ends the call, retriable or not:
            # kept current, the abort the application must call would be refused.
            if not resumable or error is None or not error.retriable() \
                    or error.txn_requires_abort() or error.fatal():
                if self._api is call:
                    self._api = None
        if error is not None:
            raise KafkaException(error)

    def _wait(self, call: _ApiCall, deadline: float) -> Optional[KafkaError]:
        """Wait for the I/O thread's result of ``call`` (a retriable _TIMED_OUT when it
        does not come by ``deadline``)."""
        while not call.done.wait(max(0.0, min(0.2, deadline - time.monotonic()))):
            if self.cluster.waits_abandoned:   # the producer was closed meanwhile
                return KafkaError(KafkaError._DESTROY, "the producer was closed while "
                                  "this call waited")
            if time.monotonic() >= deadline:
                return KafkaError(KafkaError._TIMED_OUT, "Timed out waiting for operation "
                                  "to finish, retry call to resume", retriable=True)
        with self.lock:
            call.done.clear()
            error, call.error = call.error, None
        return error

    @staticmethod
    def _expect_result(call: _ApiCall) -> None:
        """Under the lock, before handing the I/O thread a step: forget what an earlier
        step left (a resumed call's stale outcome)."""
        call.done.clear()
        call.error = None

    def _set_result(self, error: Optional[KafkaError],
                    asker: Optional[_ApiCall] = None) -> None:
        """I/O thread: the result of the current API call's background part; with
        ``asker``, only while that call is the current one (an answer it no longer
        waits for is not the outcome of the call made since)."""
        with self.lock:
            call = self._api
            if call is None or (asker is not None and call is not asker):
                return  # nobody asked any more (the call gave up)
            if call.error is None or (error is not None and error.fatal()):
                call.error = error
            call.done.set()

    def _flush_or_raise(self, call: _ApiCall, flush: Callable[[Optional[float]], int],
                        deadline: float) -> None:
        try:
            left = flush(max(0.0, deadline - time.monotonic()))
        except KafkaException as exc:
            # The flush served the fatal error event: that is this call's outcome (not an
            # interruption that would leave the call current, refusing every other call)
            error = exc.args[0] if exc.args else None
            if isinstance(error, KafkaError) and error.fatal():
                self._end_api(call, error, resumable=False)
            raise
        if left:
            self._end_api(call, KafkaError(
                KafkaError._TIMED_OUT, f"Failed to flush all outstanding messages within "
                f"the API timeout: {left} message(s) remaining", retriable=True),
                resumable=True)

    def _run_on_io(self, fn: Callable[[], None], deadline: float) -> None:
        """Run ``fn`` on the I/O thread and wait for it (up to ``deadline``)."""
        done = threading.Event()

        def run() -> None:
            try:
                fn()
            finally:
                done.set()
        self.io.call_soon(run)
        while not done.wait(0.2) and time.monotonic() < deadline \
                and not self.cluster.waits_abandoned:
            pass

    def _capped_deadline(self, timeout: Optional[float]) -> float:
        """As librdkafka: an offset commit waits at most transaction.timeout.ms."""
        cap = self.timeout_ms / 1000.0
        limit = wait_limit(timeout)  # TypeError for what is not a number of seconds
        return time.monotonic() + (cap if limit is None or limit > cap else limit)

    # -- states (under the lock) --------------------------------------------------------
    def _set_state(self, state: TxnState) -> None:
        if state != self.state:
            self.log.debug("transaction state %s -> %s", self.state.value, state.value)
            self.state_since = time.monotonic()
        self.state = state
        self.acc.refuse_produce(None if self.may_produce else self.produce_refused)

    def _require(self, api: str) -> Optional[KafkaError]:
        """None if ``api`` may run in the current state, else the error to raise: the
        fatal or abortable error that holds, or _STATE naming the state."""
        if self.state in _API_STATES[api]:
            return None
        return self._state_error(api)

    def _require_exactly(self, state: TxnState) -> Optional[KafkaError]:
        if self.state == state:
            return None
        return self._state_error(None)

    def _state_error(self, api: Optional[str]) -> KafkaError:
        if self.state == TxnState.FATAL_ERROR and self.error is not None:
            return self.error
        if self.state == TxnState.ABORTABLE_ERROR and self.error is not None:
            return self.error      # needs an abort, not retriable (_abortable_locked)
        hint = _STATE_HINTS.get(self.state)
        what = f"{api}() is not" if api else "Operation not"
        return client_error(KafkaError._STATE, f"{what} valid in transaction state "
                          f"{self.state.value}" + (f": {hint}" if hint else ""))

    @property
    def _coordinator_knows(self) -> bool:
        """The coordinator may hold this transaction open: commit and abort end it with
        an EndTxn."""
        return self._partitions_seen or self._offsets_seen

    def _coordinator_forgets(self) -> None:
        self._partitions_seen = self._offsets_seen = False

    def _complete(self) -> None:
        """The transaction ended (committed or aborted, and acknowledged)."""
        self.acc.txn_partitions = set()
        self._pending.clear()
        self._coordinator_forgets()
        self.error = None
        self._set_state(TxnState.READY)

    # ================================================================ I/O thread hooks
    def tick(self, now: float) -> Optional[float]:
        """Register the partitions that got batches since the last look (sender's
        tick). Returns when to look again, if sooner than the next wake-up."""
        if self.state not in (TxnState.IN_TRANSACTION, TxnState.BEGIN_COMMIT):
            return None
        for p in self.acc.unregistered():
            if p not in self._registering:
                self._pending.add(p)
        if not self._pending or self._registering:
            return None
        if now < self._register_after:
            return self._register_after
        self._register_partitions()
        return None

    def delivery_failed(self, count: int) -> None:
        """Messages of the open transaction failed: commit must refuse (I/O thread)."""
        self.delivery_failures += count

    def abortable_error(self, error: KafkaError, bump: bool = False) -> None:
        """The open transaction cannot commit: it must be aborted (I/O thread). Queued
        messages are purged at once, as librdkafka does."""
        with self.lock:
            changed = self._abortable_locked(error, bump)
        if changed and self.sender is not None:
            self._purge_queued()
        if changed:
            self._set_result(self._state_error(None))

    def _abortable_locked(self, error: KafkaError, bump: bool) -> bool:
        if self.state == TxnState.FATAL_ERROR:
            return False
        if bump:
            self.needs_bump = True
        if self.error is not None or self.state not in (
                TxnState.IN_TRANSACTION, TxnState.BEGIN_COMMIT, TxnState.COMMITTING):
            return False  # the first error counts; aborting already
        self.log.error("transaction failed in state %s: %s (%s)%s", self.state.value,
                       error.str(), error.name(), " (requires an epoch bump)" if bump else "")
        # Not retriable: what the application does is abort, not call again.
        self.error = KafkaError(error.code(), error.str(), retriable=False,
                                txn_requires_abort=True)
        self._set_state(TxnState.ABORTABLE_ERROR)
        return True

    def fatal_error(self, error: KafkaError) -> None:
        """The producer can do nothing more (fenced, not authorized, ...): every message
        fails with ``error``, every API call raises it (I/O thread)."""
        with self.lock:
            if self.state == TxnState.FATAL_ERROR:
                return
            fatal = client_error(error.code(), error.str(), fatal=True)
            self.log.error("fatal transaction error: %s (%s)", fatal.str(), fatal.name())
            self.error = fatal
            self._set_state(TxnState.FATAL_ERROR)
        if self.sender is not None:
            self.sender.fatal(fatal)
        self._set_result(fatal)

    # -- I/O thread work ---------------------------------------------------------------
    def _purge_queued(self) -> None:
        """Fail what is queued (not what is in flight) with _PURGE_QUEUE (a purged batch
        that had its sequence number asks for an epoch bump, through the sender)."""
        self.sender.purge_queued(client_error(KafkaError._PURGE_QUEUE,
                                            "purged: the transaction is aborted"))

    def _init_producer_id(self, bump: bool = False) -> None:
        """InitProducerId for the transactional id, on its coordinator; on success the
        idempotence state gets the producer id and epoch, and sequences restart. With
        ``bump``, the current id and epoch are sent (KIP-360: the coordinator bumps the
        epoch, aborting what is open)."""
        idem = self.idem
        current = (idem.producer_id, idem.epoch) if bump else (-1, -1)

        def build(version: int) -> Any:
            if current[0] >= 0 and version < 3:
                # Before v3 (Kafka < 2.5) the request cannot name the epoch to bump, and
                # a plain InitProducerId bumps it for whoever asks: an instance that took
                # this transactional id over meanwhile would be fenced by this old one.
                raise CallError(client_error(
                    KafkaError._UNSUPPORTED_FEATURE,
                    f"Failed to bump the producer epoch: needs InitProducerId v3 or later "
                    f"(KIP-360, Apache Kafka 2.5); the transaction coordinator has "
                    f"v{version}: close this producer and start a new one"))
            pid, epoch = current if version >= 3 else (-1, -1)
            return InitProducerIdRequest(transactional_id=self.transactional_id,
                                         transaction_timeout_ms=self.timeout_ms,
                                         producer_id=pid, producer_epoch=epoch)

        def answer(resp: Any, conn: Any) -> Optional[KafkaError]:
            code = broker_code(resp.error_code)
            if code == ErrorCode.NONE and not has_producer_id(resp):
                self.log.warning("InitProducerId answered without a usable producer id and "
                                 "epoch (%d, epoch %d); retrying", resp.producer_id,
                                 resp.producer_epoch)
                # Kept, so that init_transactions() timing out says why.
                self._last_init_error = client_error(
                    ErrorCode.UNKNOWN_SERVER_ERROR,
                    "InitProducerId answered without a usable producer id and epoch")
                return self._last_init_error
            if code == ErrorCode.NONE:
                idem.assigned(resp.producer_id, resp.producer_epoch, time.monotonic())
                self.log.info("transactional id %s: producer id %d epoch %d",
                              self.transactional_id, resp.producer_id, resp.producer_epoch)
                self.sender.restart_sequences()
                self._pid_assigned()
                return None
            error = client_error(code, f"InitProducerId: {client_error(code).name()}")
            self._last_init_error = error
            if code in _INIT_PID_FATAL:
                self.fatal_error(fenced_error(code, "InitProducerId") if code in _FENCED
                                 else client_error(code, f"Failed to initialize the "
                                                 f"transactional producer: {error.str()}"))
                return None
            if code in _COORDINATOR_MOVED or code in _RETRY or code in _FATAL:
                return error  # the same request again, after the backoff
            if bump and current[0] >= 0 and code == ErrorCode.UNKNOWN_SERVER_ERROR:
                # The coordinator cannot bump this epoch (Tansu 0.6 answers
                # UNKNOWN_SERVER_ERROR): without the current id and epoch it bumps the
                # transactional id's epoch as for a restart, which serves as well. Only
                # for that answer: asked so, a coordinator bumps for whoever asks and
                # would fence an instance that took the transactional id over.
                self.log.info("epoch bump refused (%s): asking without the current epoch",
                              error.str())
                self.io.call_later(self.backoff, self._init_producer_id, False)
                return None
            return error

        def failed(error: KafkaError) -> None:
            # Out of time (or connections lost): keep trying in the background while a
            # producer id is still wanted, as librdkafka does.
            self._last_init_error = error
            if error.code() == KafkaError._UNSUPPORTED_FEATURE or error.code() in _INIT_PID_FATAL:
                # _INIT_PID_FATAL here: the FindCoordinator before it refused by the ACLs
                # (DESCRIBE on the transactional id), fatal at once as in librdkafka.
                self.fatal_error(error)
            elif self.state in (TxnState.WAIT_PID, TxnState.ABORTING):
                self.io.call_later(self.backoff, self._init_producer_id, bump)

        self._to_coordinator(CoordinatorType.TRANSACTION, self.transactional_id,
                             "InitProducerId", ApiKey.INIT_PRODUCER_ID, build, answer,
                             failed, self._long_deadline())

    def _register_delay(self, first: Optional[float] = None) -> float:
        """The wait before partitions are registered again after one more failure in a
        row: ``first`` (default retry.backoff.ms) doubling up to retry.backoff.max.ms
        (KIP-580; a coordinator that kept refusing was asked at a flat pace)."""
        self._register_failures += 1
        return retry_delay(self.backoff if first is None else first, self.backoff_max,
                           self._register_failures)

    def _pid_assigned(self) -> None:
        """A producer id (or a bumped epoch) arrived."""
        with self.lock:
            self.needs_bump = False
            if self.state == TxnState.WAIT_PID:
                self._set_state(TxnState.READY_NOT_ACKED)
            elif self.state == TxnState.ABORTING:
                self._set_state(TxnState.ABORT_NOT_ACKED)
            else:
                return
        self._set_result(None)

    def _register_partitions(self) -> None:
        """AddPartitionsToTxn for the partitions waiting to be registered. Its retries
        are timed here (CONCURRENT_TRANSACTIONS, usual right after a commit, is retried
        after 20 ms as librdkafka does, not after retry.backoff.ms)."""
        parts = sorted(self._pending, key=lambda p: (p.topic.name, p.index))
        number = self._txn_number
        self._pending.clear()
        self._registering = set(parts)
        # The coordinator knows of the transaction once an attempt goes out (build()),
        # not before: aborted before then, the abort must send no EndTxn (one sent was
        # answered INVALID_TXN_STATE, fatal).
        knew = self._partitions_seen
        idem = self.idem
        by_topic: Dict[str, List[int]] = {}
        for p in parts:
            by_topic.setdefault(p.topic.name, []).append(p.index)

        def build(version: int) -> Any:
            # Built again for each retry: one of a transaction that has ended meanwhile
            # (aborted while the first answer was lost) is not sent. Sent after the
            # EndTxn, it opened a transaction nobody ended, which the coordinator timed
            # out by fencing this producer.
            if number != self._txn_number or self.state not in (
                    TxnState.IN_TRANSACTION, TxnState.BEGIN_COMMIT):
                raise CallError(KafkaError(KafkaError._STATE, "the transaction is over"))
            self._partitions_seen = True   # each attempt may be seen
            topics = [AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=ps)
                      for t, ps in by_topic.items()]
            return AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=self.transactional_id,
                v3_and_below_producer_id=idem.producer_id,
                v3_and_below_producer_epoch=idem.epoch, v3_and_below_topics=topics)

        def answer(resp: Any, conn: Any) -> Optional[KafkaError]:
            results = {(t.name, r.partition_index): broker_code(r.partition_error_code)
                       for t in resp.results_by_topic_v3_and_below or ()
                       for r in t.results_by_partition or ()}
            registered = [p for p in parts
                          if results.get((p.topic.name, p.index)) == ErrorCode.NONE]
            if number != self._txn_number or self.state not in (
                    TxnState.IN_TRANSACTION, TxnState.BEGIN_COMMIT):
                # outdated: that transaction is over, or being aborted (the abort may
                # wait for this answer)
                if number == self._txn_number:
                    if not registered:
                        self._partitions_seen = knew
                    self._abort_registering_answered()
                return None
            self._registering = set()
            failed = [(p, results.get((p.topic.name, p.index), ErrorCode.UNKNOWN_SERVER_ERROR))
                      for p in parts if p not in registered]
            if not registered:
                # Answered, and nothing added: the coordinator knows no more than before
                # (an EndTxn for a transaction it never started is INVALID_TXN_STATE,
                # fatal: the Java client does not send it either).
                self._partitions_seen = knew
            self.acc.txn_partitions.update(registered)
            self.io.wake()
            if not failed:
                self._register_failures = 0
                return None
            self._pending.update(p for p, _ in failed)
            worst = _worst({code for _, code in failed})
            what = ", ".join(f"{p.topic.name}[{p.index}]: {client_error(c).name()}"
                             for p, c in failed[:5])
            if worst in _FATAL:
                self.fatal_error(fenced_error(worst, "AddPartitionsToTxn") if worst in _FENCED
                                 else client_error(worst, f"Failed to add partitions to the "
                                                 f"transaction: {what}"))
            elif worst in _COORDINATOR_MOVED:
                self.runner.coordinators.pop((CoordinatorType.TRANSACTION,
                                              self.transactional_id), None)
                self._register_after = time.monotonic() + self._register_delay()
            elif worst in _RETRY:
                self._register_after = time.monotonic() + self._register_delay(
                    _CONCURRENT_BACKOFF if worst == ErrorCode.CONCURRENT_TRANSACTIONS
                    else self.backoff)
            else:
                self.abortable_error(client_error(worst, f"Failed to add partitions to the "
                                                f"transaction: {what}"),
                                     bump=worst in _NEEDS_BUMP)
            return None

        def failed(error: KafkaError) -> None:
            if number != self._txn_number or self.state not in (
                    TxnState.IN_TRANSACTION, TxnState.BEGIN_COMMIT):
                # outdated: that transaction is over, or being aborted (no answer: the
                # coordinator may have seen the request, it knows)
                if number == self._txn_number:
                    self._abort_registering_answered()
                return
            self._pending.update(parts)
            self._registering = set()
            self._register_after = time.monotonic() + self._register_delay()
            self.io.wake()
            if error.code() == KafkaError._UNSUPPORTED_FEATURE:
                self.fatal_error(error)

        self._to_coordinator(CoordinatorType.TRANSACTION, self.transactional_id,
                             "AddPartitionsToTxn", ApiKey.ADD_PARTITIONS_TO_TXN, build, answer,
                             failed, time.monotonic() + self.request_timeout,
                             max_version=_ADD_PARTITIONS_MAX_VERSION)

    def _add_offsets(self, offsets: List[TopicPartition], group: Any,
                     deadline: float, asker: _ApiCall) -> None:
        """send_offsets_to_transaction's I/O part, step 1: AddOffsetsToTxn. Its requests
        belong to this transaction and their outcome to the call ``asker``: a
        transaction over (aborted while they waited for a coordinator) sends no more of
        them, and their late answers are nobody's (a TxnOffsetCommit of an aborted
        transaction went out after its EndTxn, and its answer completed the next
        transaction's send_offsets_to_transaction() before that call's own requests)."""
        if self.state != TxnState.IN_TRANSACTION:
            self._set_result(self._state_error("send_offsets_to_transaction"), asker)
            return
        idem = self.idem
        knew = self._offsets_seen   # counts once an attempt goes out (see _register)
        number = self._txn_number

        def build(version: int) -> Any:
            self._offsets_request_out(number)
            self._offsets_seen = True   # each attempt may be seen
            return AddOffsetsToTxnRequest(transactional_id=self.transactional_id,
                                          producer_id=idem.producer_id,
                                          producer_epoch=idem.epoch, group_id=group.group_id)

        def answer(resp: Any, conn: Any) -> Optional[KafkaError]:
            if number != self._txn_number:
                return None             # that transaction is over
            code = broker_code(resp.error_code)
            if code == ErrorCode.NONE:
                self._offsets_answered()
                self._txn_offset_commit(offsets, group, deadline, asker, number)
                return None
            self._offsets_seen = knew   # refused: nothing added (see above)
            self._offsets_answered()    # (after: an abort waiting decides on it)
            return self._failed_in_transaction(code, "AddOffsetsToTxn",
                                               "Failed to add offsets to the transaction",
                                               asker)

        self._to_coordinator(CoordinatorType.TRANSACTION, self.transactional_id,
                             "AddOffsetsToTxn", ApiKey.ADD_OFFSETS_TO_TXN, build, answer,
                             lambda error: self._offsets_failed(error, asker, number),
                             deadline)

    def _txn_offset_commit(self, offsets: List[TopicPartition], group: Any,
                           deadline: float, asker: _ApiCall, number: int) -> None:
        """Step 2: TxnOffsetCommit to the group coordinator, with the group metadata
        (for transaction ``number`` and the call ``asker``, see _add_offsets)."""
        idem = self.idem
        by_topic: Dict[str, List[TopicPartition]] = {}
        for tp in offsets:
            by_topic.setdefault(tp.topic, []).append(tp)

        def build(version: int) -> Any:
            self._offsets_request_out(number)
            R = TxnOffsetCommitRequest
            topics = [R.TxnOffsetCommitRequestTopic(name=t, partitions=[
                R.TxnOffsetCommitRequestPartition(
                    partition_index=tp.partition, committed_offset=tp.offset,
                    committed_leader_epoch=(tp.leader_epoch if version >= 2 and
                                            tp.leader_epoch is not None else -1),
                    committed_metadata=metadata_to_commit(tp.metadata))
                for tp in tps])
                for t, tps in by_topic.items()]
            req = R(transactional_id=self.transactional_id, group_id=group.group_id,
                    producer_id=idem.producer_id, producer_epoch=idem.epoch, topics=topics)
            if version >= 3:   # KIP-447: the coordinator fences zombie group members
                req.generation_id = group.generation_id
                req.member_id = group.member_id
                req.group_instance_id = group.group_instance_id
            return req

        def answer(resp: Any, conn: Any) -> Optional[KafkaError]:
            if number != self._txn_number:
                return None             # that transaction is over
            self._offsets_answered()
            codes = {(t.name, p.partition_index): broker_code(p.error_code)
                     for t in resp.topics or () for p in t.partitions or ()}
            failed = []
            for tp in offsets:
                # A partition the answer leaves out is not committed (as AddPartitionsToTxn).
                code = codes.get((tp.topic, tp.partition), ErrorCode.UNKNOWN_SERVER_ERROR)
                if code:
                    failed.append((tp.topic, tp.partition, code))
            if not failed:
                self._set_result(None, asker)
                return None
            what = ", ".join(f"{t}[{i}]: {client_error(c).name()}" for t, i, c in failed[:5])
            return self._failed_in_transaction(
                _worst({c for _, _, c in failed}), "TxnOffsetCommit",
                f"Failed to commit offsets to the transaction ({what})", asker)

        self._to_coordinator(CoordinatorType.GROUP, group.group_id, "TxnOffsetCommit",
                             ApiKey.TXN_OFFSET_COMMIT, build, answer,
                             lambda error: self._offsets_failed(error, asker, number),
                             deadline)

    def _offsets_failed(self, error: KafkaError, asker: _ApiCall, number: int) -> None:
        """An offsets request's call ended without an answer it took (deadline, lost
        connections, or refused to go out once its transaction was over)."""
        if number == self._txn_number:
            self._offsets_answered()
        self._set_result_retriable(error, asker)

    def _offsets_answered(self) -> None:
        """No offsets request of this transaction is out any more: an abort waiting for
        its answer goes on."""
        self._offsets_out = None
        self._abort_may_go_on()

    def _offsets_request_out(self, number: int) -> None:
        """In an offsets request's build(): it goes out now (an abort waits for its
        answer, see _finish_abort); unless transaction ``number`` is over, or being
        aborted or failed: then CallError, and it is not sent (see
        _register_partitions)."""
        if number != self._txn_number or self.state not in (
                TxnState.IN_TRANSACTION, TxnState.BEGIN_COMMIT):
            raise CallError(KafkaError(KafkaError._STATE, "the transaction is over"))
        self._offsets_out = time.monotonic()

    def _failed_in_transaction(self, code: int, what: str, text: str,
                               asker: _ApiCall) -> Optional[KafkaError]:
        """An offsets request's error: retry (returned), fatal, or abortable."""
        if code in _COORDINATOR_MOVED or code in _RETRY:
            return client_error(code, f"{what}: {client_error(code).name()}")
        if code in _FATAL:
            self.fatal_error(fenced_error(code, what) if code in _FENCED
                             else client_error(code, f"{text}: {client_error(code).name()}"))
            return None
        error = client_error(code, f"{text}: {client_error(code).name()}")
        self.abortable_error(error)
        self._set_result(client_error(code, error.str(), txn_requires_abort=True), asker)
        return None

    def _end_txn(self, commit: bool) -> None:
        """EndTxn: commit or abort on the coordinator. A request that cannot be completed
        in time leaves the transaction to be ended by calling the API again."""
        idem = self.idem
        what = "commit" if commit else "abort"

        def build(version: int) -> Any:
            return EndTxnRequest(transactional_id=self.transactional_id,
                                 producer_id=idem.producer_id, producer_epoch=idem.epoch,
                                 committed=commit)

        def answer(resp: Any, conn: Any) -> Optional[KafkaError]:
            code = broker_code(resp.error_code)
            if code == ErrorCode.NONE:
                self._end_txn_done(commit)
                return None
            if code in _COORDINATOR_MOVED or code in _RETRY:
                return client_error(code, f"EndTxn({what}): {client_error(code).name()}")
            if code in _FATAL:
                self.fatal_error(fenced_error(code, f"EndTxn({what})") if code in _FENCED
                                 else client_error(code, f"Failed to {what} the transaction: "
                                                 f"{client_error(code).name()}"))
                return None
            error = client_error(code, f"Failed to {what} the transaction: "
                               f"{client_error(code).name()}", txn_requires_abort=True)
            if code in _NEEDS_BUMP and not commit:
                # The coordinator lost the producer id: the bump aborts what is open.
                self.needs_bump = True
                self._coordinator_forgets()
                self._init_producer_id(bump=True)
                return None
            with self.lock:
                if not commit and self.state == TxnState.ABORTING:
                    self._set_state(TxnState.BEGIN_ABORT)  # abort may be called again
            self.abortable_error(error, bump=code in _NEEDS_BUMP)
            with self.lock:
                if not commit and self.state == TxnState.BEGIN_ABORT:
                    self.error = error
                    self._set_state(TxnState.ABORTABLE_ERROR)
            self._set_result(error)
            return None

        def failed(error: KafkaError) -> None:
            # Not ended in time: the next call of the same API sends EndTxn again.
            with self.lock:
                if self.state == TxnState.COMMITTING:
                    self._set_state(TxnState.BEGIN_COMMIT)
                elif self.state == TxnState.ABORTING:
                    self._set_state(TxnState.BEGIN_ABORT)
            self._set_result_retriable(error)

        self._to_coordinator(CoordinatorType.TRANSACTION, self.transactional_id,
                             f"EndTxn({what})", ApiKey.END_TXN, build, answer, failed,
                             self._long_deadline(), max_version=_END_TXN_MAX_VERSION)

    def _end_txn_done(self, commit: bool) -> None:
        with self.lock:
            self._coordinator_forgets()   # a second EndTxn would find no transaction
            failed_meanwhile = commit and self.state == TxnState.ABORTABLE_ERROR
            error = self.error
        if failed_meanwhile:
            assert error is not None     # ABORTABLE_ERROR is entered with its error
            # As librdkafka: committed on the broker, failed here: nothing consistent is
            # left to do with this producer.
            self.fatal_error(client_error(error.code(), f"the transaction was committed "
                                        f"on the broker after it had failed here: "
                                        f"{error.str()}"))
            return
        with self.lock:
            if commit and self.state == TxnState.COMMITTING:
                self._set_state(TxnState.COMMIT_NOT_ACKED)
            elif not commit and self.state == TxnState.ABORTING:
                if self.needs_bump:
                    self.io.call_soon(self._init_producer_id, True)
                    return
                self._set_state(TxnState.ABORT_NOT_ACKED)
            else:
                return
        self._set_result(None)

    def _finish_abort(self) -> None:
        """After the purge and the flush: EndTxn(abort) if the coordinator knows of the
        transaction, and the epoch bump if one is needed. With an AddPartitionsToTxn out,
        its answer says whether it does: CONCURRENT_TRANSACTIONS (the coordinator still
        writing the last transaction's markers, usual right after a commit) added
        nothing, and an EndTxn for a transaction the coordinator never started is
        INVALID_TXN_STATE, fatal (found on the test cluster once it answers so, as Kafka
        does, until the markers are replicated)."""
        if self._registering:
            self._abort_waits = True
            return
        if self._offsets_out is not None:
            # An AddOffsetsToTxn or TxnOffsetCommit is on the wire: answered first, as the
            # Java client sends one transactional request at a time. A TxnOffsetCommit
            # reaching the group coordinator after the abort's markers stays pending there
            # for the producer id's next transaction (committed with it, or holding the
            # group's offsets unstable). Its answer, or at the latest the request timeout
            # after it went out, lets the abort go on.
            self._abort_waits = True
            self.io.call_at(self._offsets_out + self.request_timeout,
                            self._offsets_given_up, self._txn_number)
            return
        if self._coordinator_knows:
            self._end_txn(False)
        elif self.needs_bump:
            self._init_producer_id(bump=True)
        else:
            self._end_txn_done(False)

    def _abort_registering_answered(self) -> None:
        """The AddPartitionsToTxn out when the transaction began to end is over: an
        abort waiting for it goes on."""
        self._registering = set()
        self._abort_may_go_on()

    def _offsets_given_up(self, number: int) -> None:
        """Timer: an offsets request out when the abort began got no answer within the
        request timeout (see _finish_abort)."""
        if number == self._txn_number and self._offsets_out is not None:
            self._offsets_answered()

    def _abort_may_go_on(self) -> None:
        """A request an abort waited for is over: the abort goes on (or waits again, for
        another one still out)."""
        if self._abort_waits:
            self._abort_waits = False
            self._finish_abort()

    def _set_result_retriable(self, error: KafkaError,
                              asker: Optional[_ApiCall] = None) -> None:
        self._set_result(KafkaError(error.code(), error.str(), retriable=True), asker)

    def _long_deadline(self) -> float:
        """How long a step the application may resume retries on its own (librdkafka
        caps its waits at transaction.timeout.ms)."""
        return time.monotonic() + max(self.timeout_ms / 1000.0, self.request_timeout)

    def _to_coordinator(self, key_type: CoordinatorType, key: str, name: str,
                        api_key: ApiKey, build: Callable[[int], Any],
                        answer: Callable[[Any, Any], Optional[KafkaError]],
                        fail: Callable[[KafkaError], None], deadline: float,
                        max_version: Optional[int] = None) -> None:
        """Send ``build(version)`` to the coordinator of ``key`` (looked up with
        FindCoordinator, cached; looked up again when it moves or its connection is
        lost). ``answer(response, conn)`` returns None when done, or the error to retry
        after the backoff; ``fail(error)`` runs if ``deadline`` passes first."""
        if self.state == TxnState.FATAL_ERROR or self.cluster.closed:
            return
        self.runner.submit(Call(name, api_key, Coordinator(key_type, key), deadline, build,
                                answer, fail, max_version=max_version))


def _worst(codes: Set[int]) -> int:
    """The error that decides among several partitions' errors (fatal first)."""
    for group in (_FATAL, _NEEDS_BUMP):
        for code in codes:
            if code in group:
                return code
    for code in codes:
        if code not in _COORDINATOR_MOVED and code not in _RETRY:
            return code
    for code in codes:
        if code in _COORDINATOR_MOVED:
            return code
    return next(iter(codes))


def _check_offsets_args(offsets: Any, group_metadata: Any) -> List[TopicPartition]:
    """The offsets worth committing (offset >= 0); TypeError/_INVALID_ARG for bad
    arguments, as confluent-kafka raises them."""
    if not isinstance(offsets, (list, tuple)):
        raise TypeError(f"offsets must be a list of TopicPartition, not "
                        f"{type(offsets).__name__}")
    for tp in offsets:
        if not isinstance(tp, TopicPartition):
            raise TypeError(f"offsets must be a list of TopicPartition, found "
                            f"{type(tp).__name__}")
    if group_metadata is None or not isinstance(getattr(group_metadata, "group_id", None),
                                                str):
        raise TypeError(f"group_metadata must be the consumer's consumer_group_metadata(), "
                        f"not {type(group_metadata).__name__}")
    seen = set()
    valid = []
    for tp in offsets:
        if tp.partition < 0:
            raise KafkaException(client_error(KafkaError._INVALID_ARG,
                                            f"{tp.topic}: invalid partition {tp.partition}"))
        key = (tp.topic, tp.partition)
        if key in seen:
            raise KafkaException(client_error(KafkaError._INVALID_ARG,
                                            f"{tp.topic}[{tp.partition}] appears twice"))
        seen.add(key)
        if tp.offset >= 0:   # logical offsets (OFFSET_INVALID, ...) are skipped, as
            valid.append(tp)  # librdkafka does: nothing consumed there
    return valid
