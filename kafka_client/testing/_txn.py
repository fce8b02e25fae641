"""Producer ids and transactions: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
EndTxn and TxnOffsetCommit.

Like the group coordinator, one transaction coordinator holds every transactional id of
the cluster and a broker answers for an id only while it is that id's coordinator.
EndTxn writes a COMMIT or ABORT marker (a control batch) to every partition of the
transaction through its leader, and moves the transaction's offset commits into the
group (commit) or drops them (abort). A transaction older than its timeout is aborted and
its producer's epoch bumped, fencing the producer.
"""
from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Optional, Set, Tuple

from kafka_proto.enums import AclOperation, AclResourceType, CoordinatorType, TransactionState
from kafka_proto.errors import ErrorCode
from kafka_proto.messages import (
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    ApiKey,
    EndTxnResponse,
    InitProducerIdResponse,
    TxnOffsetCommitResponse,
)
from kafka_proto.records import ControlRecordType, build_control_batch

from ._acls import CLUSTER_NAME
from ._api import RequestContext, error_answer, handles
from ._groups import CommittedOffset

if TYPE_CHECKING:  # pragma: no cover
    from ._server import ClusterServer

__all__ = ["TransactionCoordinator", "Transaction"]

_log = logging.getLogger("kafka_client.testing")

_MAX_EPOCH = 32767
#: Pause before retrying a marker whose partition has no leader.
_MARKER_RETRY = 0.05


@dataclass
class Transaction:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: str = TransactionState.EMPTY
    partitions: Set[Tuple[str, int]] = field(default_factory=set)
    groups: Set[str] = field(default_factory=set)
    started: float = 0.0
    timer: Any = None
    #: The partitions whose marker of the last end is not replicated yet: the next
    #: transaction and InitProducerId wait for them (CONCURRENT_TRANSACTIONS, as Kafka's
    #: coordinator answers while the previous one is PREPARE_COMMIT or PREPARE_ABORT),
    #: so that its records come after the marker in every log.
    markers_pending: Set[Tuple[str, int]] = field(default_factory=set)
    #: The epoch a KIP-360 bump (InitProducerId v3+ naming the current epoch) moved on
    #: from, so that a retry of that bump gets the same answer; -1 after a plain
    #: InitProducerId (a new instance), whose fenced predecessors must stay fenced.
    last_epoch: int = -1


class TransactionCoordinator:
    def __init__(self, server: "ClusterServer") -> None:
        self.server = server
        self.transactions: Dict[str, Transaction] = {}

    def owns(self, ctx: RequestContext, transactional_id: str) -> bool:
        return (self.server.controller.coordinator(CoordinatorType.TRANSACTION, transactional_id)
                == ctx.broker.broker_id)

    # -- InitProducerId --------------------------------------------------------------
    def init_producer_id(self, ctx: RequestContext) -> Any:
        req = ctx.request
        server = self.server
        if req.transactional_id is None:
            return InitProducerIdResponse(error_code=ErrorCode.NONE,
                                          producer_id=server.allocate_producer_id(),
                                          producer_epoch=0)
        tid = req.transactional_id
        if not tid:
            return _init_error(ErrorCode.INVALID_REQUEST)
        if not self.owns(ctx, tid):
            return _init_error(ErrorCode.NOT_COORDINATOR)
        if not 0 < req.transaction_timeout_ms <= server.settings["transaction.max.timeout.ms"]:
            return _init_error(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        txn = self.transactions.get(tid)
        if txn is None:
            txn = Transaction(tid, server.allocate_producer_id(), 0, req.transaction_timeout_ms)
            self.transactions[tid] = txn
            return _init_ok(txn)
        if txn.markers_pending and not (ctx.version >= 3 and
                                        0 <= req.producer_id != txn.producer_id):
            # As Kafka's coordinator while the last transaction is PREPARE_COMMIT or
            # PREPARE_ABORT (after the producer id's check, before the epoch's): the
            # client retries; its new epoch's records then come after every marker.
            return _init_error(ErrorCode.CONCURRENT_TRANSACTIONS)
        bumped_from = -1
        if ctx.version >= 3 and req.producer_id >= 0:
            # KIP-360: a producer that knows its id and epoch asks for a bump. The epoch
            # the last such bump moved on from is a retry of it (its answer was lost):
            # the current epoch again. Any other epoch is a fenced instance's (after a
            # plain InitProducerId there is no such retry: the one before is fenced).
            if req.producer_id == txn.producer_id and req.producer_epoch == txn.last_epoch \
                    and txn.producer_epoch != txn.last_epoch:
                return _init_ok(txn)
            if req.producer_id != txn.producer_id or req.producer_epoch != txn.producer_epoch:
                # PRODUCER_FENCED from v4 (KIP-588), INVALID_PRODUCER_EPOCH before
                return _init_error(ErrorCode.PRODUCER_FENCED if ctx.version >= 4
                                   else ErrorCode.INVALID_PRODUCER_EPOCH)
            bumped_from = txn.producer_epoch
        if txn.state == TransactionState.ONGOING:
            # Fenced first, as Kafka's coordinator does: the abort markers carry the new
            # epoch, so the partition leaders refuse the old instance's next batches
            # (written with the old one, they let it go on producing into the log).
            self._bump(txn)
            self._end(txn, commit=False)
        txn.timeout_ms = req.transaction_timeout_ms
        self._bump(txn)
        txn.last_epoch = bumped_from
        txn.state = TransactionState.EMPTY
        return _init_ok(txn)

    def _bump(self, txn: Transaction) -> None:
        if txn.producer_epoch >= _MAX_EPOCH - 1:
            txn.producer_id = self.server.allocate_producer_id()
            txn.producer_epoch = 0
        else:
            txn.producer_epoch += 1

    def _check(self, ctx: RequestContext, tid: str, producer_id: int,
               producer_epoch: int) -> Tuple[int, Optional[Transaction]]:
        """(error, transaction): the transaction is None exactly when there is an error."""
        if not self.owns(ctx, tid):
            return ErrorCode.NOT_COORDINATOR, None
        txn = self.transactions.get(tid)
        if txn is None or txn.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING, None
        if producer_epoch != txn.producer_epoch:
            return (ErrorCode.PRODUCER_FENCED if producer_epoch < txn.producer_epoch
                    else ErrorCode.INVALID_PRODUCER_EPOCH), None
        return ErrorCode.NONE, txn

    def _begin(self, txn: Transaction) -> None:
        if txn.state != TransactionState.ONGOING:
            txn.state = TransactionState.ONGOING
            txn.started = time.monotonic()
            txn.partitions = set()
            txn.groups = set()
            if txn.timer is not None:
                txn.timer.cancel()
            txn.timer = self.server.loop.call_later(txn.timeout_ms / 1000, self._timed_out,
                                                    txn.transactional_id, txn.producer_epoch)

    def _timed_out(self, tid: str, epoch: int) -> None:
        txn = self.transactions.get(tid)
        if txn is None or txn.state != TransactionState.ONGOING or txn.producer_epoch != epoch:
            return
        _log.info("transaction %s timed out: aborting", tid)
        self._end(txn, commit=False)
        self._bump(txn)   # the producer is fenced: its next request fails

    # -- AddPartitionsToTxn / AddOffsetsToTxn ----------------------------------------
    def add_partitions(self, ctx: RequestContext) -> Any:
        req = ctx.request
        R = AddPartitionsToTxnResponse
        error, txn = self._check(ctx, req.v3_and_below_transactional_id,
                                 req.v3_and_below_producer_id, req.v3_and_below_producer_epoch)
        if txn is not None and txn.markers_pending:
            error = ErrorCode.CONCURRENT_TRANSACTIONS
        controller = self.server.controller
        unknown = {(t.name, p) for t in req.v3_and_below_topics for p in t.partitions
                   if controller.partition(t.name, p) is None}
        results = []
        for t in req.v3_and_below_topics:
            parts = []
            for p in t.partitions:
                if error:
                    code = error
                elif unknown:
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if (t.name, p) in unknown \
                        else ErrorCode.OPERATION_NOT_ATTEMPTED
                else:
                    code = ErrorCode.NONE
                parts.append(R.AddPartitionsToTxnPartitionResult(partition_index=p,
                                                                  partition_error_code=code))
            results.append(R.AddPartitionsToTxnTopicResult(name=t.name,
                                                           results_by_partition=parts))
        if txn is not None and not error and not unknown:
            self._begin(txn)
            txn.partitions.update((t.name, p) for t in req.v3_and_below_topics
                                  for p in t.partitions)
        return R(results_by_topic_v3_and_below=results)

    def add_offsets(self, ctx: RequestContext) -> Any:
        req = ctx.request
        error, txn = self._check(ctx, req.transactional_id, req.producer_id,
                                 req.producer_epoch)
        if txn is not None and txn.markers_pending:
            error = ErrorCode.CONCURRENT_TRANSACTIONS
        if txn is not None and not error:
            self._begin(txn)
            txn.groups.add(req.group_id)
        return AddOffsetsToTxnResponse(error_code=error)

    # -- EndTxn ----------------------------------------------------------------------
    def end_txn(self, ctx: RequestContext) -> Any:
        req = ctx.request
        error, txn = self._check(ctx, req.transactional_id, req.producer_id,
                                 req.producer_epoch)
        if txn is None:
            return EndTxnResponse(error_code=error)
        if txn.state == TransactionState.ONGOING:
            self._end(txn, req.committed)
            return EndTxnResponse(error_code=ErrorCode.NONE)
        # A retried EndTxn of a finished transaction succeeds; the opposite one cannot.
        if (txn.state == TransactionState.COMPLETE_COMMIT and req.committed) or \
                (txn.state == TransactionState.COMPLETE_ABORT and not req.committed):
            return EndTxnResponse(error_code=ErrorCode.NONE)
        return EndTxnResponse(error_code=ErrorCode.INVALID_TXN_STATE)

    def _end(self, txn: Transaction, commit: bool) -> None:
        if txn.timer is not None:
            txn.timer.cancel()
            txn.timer = None
        txn.markers_pending = set(txn.partitions)
        self._write_markers(txn.transactional_id, set(txn.partitions), txn.producer_id,
                            txn.producer_epoch, commit)
        groups = self.server.groups
        for group_id in txn.groups:
            group = groups.group(group_id)
            if group is None:
                continue
            offsets = group.pending_txn_offsets.pop(txn.producer_id, {})
            if commit:
                group.offsets.update(offsets)
        txn.state = TransactionState.COMPLETE_COMMIT if commit else TransactionState.COMPLETE_ABORT
        txn.partitions = set()
        txn.groups = set()

    def _write_markers(self, tid: str, keys: Set[Tuple[str, int]], producer_id: int,
                       producer_epoch: int, commit: bool) -> None:
        """The marker of a transaction's end on each partition of ``keys``, through its
        leader; written again (as Kafka's coordinator retries a marker write answered
        NOT_LEADER_OR_FOLLOWER) to a partition without a leader now, or whose leader
        lost leadership (stopped, restarted) before its followers had the marker: lost
        with that leader's log, the transaction's records were read as the producer's
        next transaction's, committed or aborted with it (soak eos seed 139: aborted
        output read as committed, committed output read as aborted)."""
        if self.transactions.get(tid) is None:
            return
        kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        controller = self.server.controller
        later: Set[Tuple[str, int]] = set()
        for key in sorted(keys):
            part = controller.partition(*key)
            if part is None:
                self.transactions[tid].markers_pending.discard(key)   # topic deleted
                continue
            broker = self.server.brokers.get(part.leader)
            replica = broker.replicas.get(key) if broker is not None and broker.up else None
            if replica is None or not replica.is_leader:
                later.add(key)
                continue
            at = replica.append_control(build_control_batch(
                kind, producer_id, producer_epoch, 0, timestamp=int(time.time() * 1000)))
            replica.wait_for_replicas(at + 1, functools.partial(
                self._marker_written, tid=tid, key=key, producer_id=producer_id,
                producer_epoch=producer_epoch, commit=commit))
        if later:
            self.server.loop.call_later(_MARKER_RETRY, self._write_markers, tid, later,
                                        producer_id, producer_epoch, commit)

    def _marker_written(self, error: int, tid: str, key: Tuple[str, int], producer_id: int,
                        producer_epoch: int, commit: bool) -> None:
        """A marker's write is over: replicated, or its leader lost leadership first."""
        if error == ErrorCode.NOT_LEADER_OR_FOLLOWER:
            self.server.loop.call_later(_MARKER_RETRY, self._write_markers, tid, {key},
                                        producer_id, producer_epoch, commit)
            return
        txn = self.transactions.get(tid)
        if txn is not None:
            txn.markers_pending.discard(key)

    # -- TxnOffsetCommit -------------------------------------------------------------
    def txn_offset_commit(self, ctx: RequestContext) -> Any:
        req = ctx.request
        R = TxnOffsetCommitResponse
        groups = self.server.groups
        error: int = ErrorCode.NONE
        if not groups.owns(ctx, req.group_id):
            error = ErrorCode.NOT_COORDINATOR
        else:
            txn = self.transactions.get(req.transactional_id)
            if txn is None or txn.producer_id != req.producer_id:
                error = ErrorCode.INVALID_PRODUCER_ID_MAPPING
            elif txn.producer_epoch != req.producer_epoch:
                error = ErrorCode.INVALID_PRODUCER_EPOCH
            elif req.group_id not in txn.groups:
                error = ErrorCode.INVALID_TXN_STATE
            elif ctx.version >= 3:
                error = groups.check_txn_commit(req.group_id, req.member_id,
                                                req.generation_id, req.group_instance_id)
        topics = []
        now = time.time()
        for t in req.topics:
            parts = []
            for p in t.partitions:
                code = error
                if not code:
                    if self.server.controller.partition(t.name, p.partition_index) is None:
                        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    else:
                        group = groups.group(req.group_id, create=True)
                        group.pending_txn_offsets.setdefault(req.producer_id, {})[
                            (t.name, p.partition_index)] = CommittedOffset(
                                p.committed_offset, p.committed_leader_epoch,
                                p.committed_metadata, now)
                parts.append(R.TxnOffsetCommitResponsePartition(
                    partition_index=p.partition_index, error_code=code))
            topics.append(R.TxnOffsetCommitResponseTopic(name=t.name, partitions=parts))
        return R(topics=topics)


def _init_ok(txn: Transaction) -> Any:
    return InitProducerIdResponse(error_code=ErrorCode.NONE, producer_id=txn.producer_id,
                                  producer_epoch=txn.producer_epoch)


def _init_error(code: int) -> Any:
    return InitProducerIdResponse(error_code=code, producer_id=-1, producer_epoch=-1)


def _coordinator(ctx: RequestContext) -> TransactionCoordinator:
    return ctx.server.transactions


def _may_write_txn(ctx: RequestContext, transactional_id: Optional[str]) -> bool:
    return transactional_id is None or ctx.allowed(
        AclOperation.WRITE, AclResourceType.TRANSACTIONAL_ID, transactional_id)


def _may_produce_idempotently(ctx: RequestContext) -> bool:
    """Kafka (KIP-679): IDEMPOTENT_WRITE on the cluster, or WRITE on some topic."""
    return ctx.allowed(AclOperation.IDEMPOTENT_WRITE, AclResourceType.CLUSTER,
                       CLUSTER_NAME) or \
        ctx.server.authorizer.authorize_any(ctx.conn, AclOperation.WRITE,
                                            AclResourceType.TOPIC)


@handles(ApiKey.INIT_PRODUCER_ID)
def init_producer_id(ctx: RequestContext) -> None:
    txn_id = ctx.request.transactional_id
    if txn_id is not None and not _may_write_txn(ctx, txn_id):
        response = _init_error(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    elif txn_id is None and not _may_produce_idempotently(ctx):
        response = _init_error(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    else:
        response = _coordinator(ctx).init_producer_id(ctx)
    ctx.note(transactional_id=ctx.request.transactional_id, producer_id=response.producer_id,
             producer_epoch=response.producer_epoch)
    ctx.respond(response)


@error_answer(ApiKey.INIT_PRODUCER_ID)
def init_producer_id_error(request: Any, version: int, code: int) -> Any:
    return _init_error(code)


@handles(ApiKey.ADD_PARTITIONS_TO_TXN)
def add_partitions_to_txn(ctx: RequestContext) -> None:
    req = ctx.request
    if not _may_write_txn(ctx, req.v3_and_below_transactional_id):
        ctx.respond(add_partitions_to_txn_error(
            req, ctx.version, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
        return
    refused = {t.name for t in req.v3_and_below_topics
               if not ctx.allowed(AclOperation.WRITE, AclResourceType.TOPIC, t.name)}
    if refused:
        # Kafka: the refused topics' partitions TOPIC_AUTHORIZATION_FAILED, the others
        # OPERATION_NOT_ATTEMPTED; nothing is added.
        R = AddPartitionsToTxnResponse
        ctx.respond(R(results_by_topic_v3_and_below=[R.AddPartitionsToTxnTopicResult(
            name=t.name, results_by_partition=[R.AddPartitionsToTxnPartitionResult(
                partition_index=p, partition_error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED
                if t.name in refused else ErrorCode.OPERATION_NOT_ATTEMPTED)
                for p in t.partitions]) for t in req.v3_and_below_topics]))
        return
    ctx.respond(_coordinator(ctx).add_partitions(ctx))


@error_answer(ApiKey.ADD_PARTITIONS_TO_TXN)
def add_partitions_to_txn_error(request: Any, version: int, code: int) -> Any:
    R = AddPartitionsToTxnResponse
    return R(results_by_topic_v3_and_below=[R.AddPartitionsToTxnTopicResult(
        name=t.name, results_by_partition=[R.AddPartitionsToTxnPartitionResult(
            partition_index=p, partition_error_code=code) for p in t.partitions])
        for t in request.v3_and_below_topics])


@handles(ApiKey.ADD_OFFSETS_TO_TXN)
def add_offsets_to_txn(ctx: RequestContext) -> None:
    req = ctx.request
    if not _may_write_txn(ctx, req.transactional_id):
        ctx.respond(AddOffsetsToTxnResponse(
            error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
    elif not ctx.allowed(AclOperation.READ, AclResourceType.GROUP, req.group_id):
        ctx.respond(AddOffsetsToTxnResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED))
    else:
        ctx.respond(_coordinator(ctx).add_offsets(ctx))


@error_answer(ApiKey.ADD_OFFSETS_TO_TXN)
def add_offsets_to_txn_error(request: Any, version: int, code: int) -> Any:
    return AddOffsetsToTxnResponse(error_code=code)


@handles(ApiKey.END_TXN)
def end_txn(ctx: RequestContext) -> None:
    ctx.note(transactional_id=ctx.request.transactional_id, committed=ctx.request.committed)
    if not _may_write_txn(ctx, ctx.request.transactional_id):
        ctx.respond(EndTxnResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
        return
    ctx.respond(_coordinator(ctx).end_txn(ctx))


@error_answer(ApiKey.END_TXN)
def end_txn_error(request: Any, version: int, code: int) -> Any:
    return EndTxnResponse(error_code=code)


@handles(ApiKey.TXN_OFFSET_COMMIT)
def txn_offset_commit(ctx: RequestContext) -> None:
    req = ctx.request
    if not _may_write_txn(ctx, req.transactional_id):
        ctx.respond(txn_offset_commit_error(req, ctx.version,
                                            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
        return
    if not ctx.allowed(AclOperation.READ, AclResourceType.GROUP, req.group_id):
        ctx.respond(txn_offset_commit_error(req, ctx.version,
                                            ErrorCode.GROUP_AUTHORIZATION_FAILED))
        return
    # Kafka: each topic needs READ; the refused ones are answered so, the others stored.
    refused = [t for t in req.topics
               if not ctx.allowed(AclOperation.READ, AclResourceType.TOPIC, t.name)]
    if refused:
        req.topics = [t for t in req.topics if t not in refused]
    response = _coordinator(ctx).txn_offset_commit(ctx)
    if refused:
        response.topics.extend(txn_offset_commit_error(
            _Topics(refused), ctx.version, ErrorCode.TOPIC_AUTHORIZATION_FAILED).topics)
    ctx.respond(response)


class _Topics:
    """A request's topics alone, for an error answer of some of them."""

    def __init__(self, topics: Any) -> None:
        self.topics = topics


@error_answer(ApiKey.TXN_OFFSET_COMMIT)
def txn_offset_commit_error(request: Any, version: int, code: int) -> Any:
    R = TxnOffsetCommitResponse
    return R(topics=[R.TxnOffsetCommitResponseTopic(name=t.name, partitions=[
        R.TxnOffsetCommitResponsePartition(partition_index=p.partition_index, error_code=code)
        for p in t.partitions]) for t in request.topics])
