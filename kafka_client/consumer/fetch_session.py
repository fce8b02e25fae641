"""Incremental fetch sessions (KIP-227), the client's half.

A broker that keeps a fetch session remembers, per partition, what the client last asked
for (offset, leader epoch, size). The next Fetch of the session then names only the
partitions whose request changed, plus those to drop, and the answer carries only the
partitions with something to say (records, an error, a new high watermark or log start);
the broker still reads every partition of the session. With many partitions most of
which are idle, requests and answers shrink from one entry per partition to one per
partition that moved.

One :class:`FetchSession` per broker connection the fetcher uses (each of a broker's
two fetch lanes has its own: a session allows one Fetch at a time). It lives on the I/O
thread and is asked for a :class:`FetchPlan` before each Fetch and told how the Fetch
ended.

Rules, as the Java client keeps them:

* the first Fetch is a full one with epoch 0, asking the broker to open a session; an
  answer with session id 0 means it did not (no room, or no support: Tansu, noida-db),
  and every Fetch stays a full one;
* a lost connection, a timeout or any error answer makes the next Fetch a full one
  again (the broker may or may not have applied the request); a full Fetch that names
  the old session id also closes it on the broker;
* FETCH_SESSION_ID_NOT_FOUND (evicted), INVALID_FETCH_SESSION_EPOCH and
  FETCH_SESSION_TOPIC_ID_ERROR are not errors of the partitions: the session is dropped
  and a full Fetch goes out at once. A broker that answers a *full* Fetch with one of
  them is not trusted with sessions again on that connection.
"""
from __future__ import annotations

from typing import Any, Collection, Dict, List, NamedTuple, Optional, Tuple

from kafka_proto.enums import FetchSessionEpoch
from kafka_proto.errors import ErrorCode

__all__ = ["FetchSession", "FetchPlan", "SessionPartition", "SESSION_ERRORS",
           "FETCH_SESSION_MIN_VERSION"]

#: Fetch v7 added the session id and epoch
FETCH_SESSION_MIN_VERSION = 7
_MAX_EPOCH = 2 ** 31 - 1

#: answers that concern the session, not the partitions
SESSION_ERRORS = frozenset((ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                            ErrorCode.INVALID_FETCH_SESSION_EPOCH,
                            ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR))


class SessionPartition(NamedTuple):
    """A partition as a Fetch asks for it (and as the broker's session then holds it)."""

    topic: str
    topic_id: Any            # a uuid from Fetch v13 on; None when topics go by name
    partition: int
    fetch_offset: int
    current_leader_epoch: int
    max_bytes: int

    def same_request(self, other: "SessionPartition") -> bool:
        """Whether a Fetch for ``other`` asks the same of the partition (the topic id
        compared by identity first: the metadata's id object is reused until the
        metadata changes, and uuid's own comparison is Python code)."""
        return self.fetch_offset == other.fetch_offset \
            and self.current_leader_epoch == other.current_leader_epoch \
            and self.max_bytes == other.max_bytes \
            and (self.topic_id is other.topic_id or self.topic_id == other.topic_id)


class FetchPlan(NamedTuple):
    """What one Fetch carries."""

    session_id: int
    epoch: int
    #: the partitions the request names
    send: List[SessionPartition]
    #: the partitions the request asks the session to drop (incremental only)
    forget: List[SessionPartition]

    @property
    def incremental(self) -> bool:
        """The broker reads the whole session and answers only what changed."""
        return self.epoch > FetchSessionEpoch.INITIAL

    def answer_is_incremental(self, session_id: int) -> bool:
        """An answer with this session id to this Fetch leaves out the partitions with
        nothing new (no records, the same offsets as last told) rather than listing all
        (an incremental Fetch may be answered sessionless, id 0, when the broker closed
        the session)."""
        return self.incremental and session_id == self.session_id


class FetchSession:
    """The fetch session of one broker connection (I/O thread only)."""

    __slots__ = ("session_id", "next_epoch", "held", "by_id", "disabled")

    def __init__(self) -> None:
        #: the broker's id for the session; 0: none open
        self.session_id = 0
        #: the epoch of the next Fetch: FetchSessionEpoch.INITIAL for a full one
        self.next_epoch: int = FetchSessionEpoch.INITIAL
        #: what the broker's session holds, by (topic, partition), as last sent
        self.held: Dict[Tuple[str, int], SessionPartition] = {}
        #: whether the session names topics by id (Fetch v13+): a Fetch of the other
        #: kind starts a new session
        self.by_id = False
        #: no sessions on this connection any more (see the module's rules)
        self.disabled = False

    def plan(self, wanted: List[SessionPartition], version: int,
             unknown: Collection[Tuple[str, int]] = ()) -> FetchPlan:
        """The next Fetch for ``wanted`` (every partition this Fetch is for): the
        session then holds exactly these. ``unknown``: the (topic, partition) of those
        the client knows nothing of yet (no answer since it was assigned again, say),
        whose answer must come even with nothing new. The broker leaves a partition
        out of an incremental answer when nothing changed since it last answered for
        it, whatever the client asks of it now, so while the session still holds one
        of them the Fetch is a full one."""
        by_id = version >= 13
        if version < FETCH_SESSION_MIN_VERSION or self.disabled:
            return FetchPlan(0, FetchSessionEpoch.FINAL, wanted, [])
        held = self.held
        self.held = now_held = {(p.topic, p.partition): p for p in wanted}
        if self.session_id == 0 or self.next_epoch == FetchSessionEpoch.INITIAL \
                or by_id != self.by_id or any(key in held for key in unknown):
            self.by_id = by_id
            return FetchPlan(self.session_id, FetchSessionEpoch.INITIAL, wanted, [])
        forget = [held[key] for key in held.keys() - now_held.keys()]
        send = []
        for key, p in now_held.items():
            before = held.get(key)
            if before is None or not before.same_request(p):
                send.append(p)
                if before is not None and before.topic_id != p.topic_id:
                    forget.append(before)   # the topic was made again: another id
        return FetchPlan(self.session_id, self.next_epoch, send, forget)

    def answered(self, plan: FetchPlan, session_id: int, error_code: int) -> bool:
        """The broker answered ``plan`` with this session id and top-level error code.
        False when the error was the session's own (see SESSION_ERRORS): the partitions
        are not at fault, and the next Fetch, a full one, should go out at once."""
        if plan.epoch == FetchSessionEpoch.FINAL:
            return True
        if error_code in SESSION_ERRORS:
            if not plan.incremental:
                self.disabled = True   # a full Fetch cannot have a session problem
            self.session_id = 0 if error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND \
                else self.session_id
            self.next_epoch = FetchSessionEpoch.INITIAL
            return False
        if error_code:
            self.next_epoch = FetchSessionEpoch.INITIAL
        elif plan.incremental:
            if session_id != plan.session_id:
                # Closed by the broker (Kafka does when a Fetch forgets every partition
                # the session held): answered sessionless, open a new one next time.
                self.session_id = 0
                self.next_epoch = FetchSessionEpoch.INITIAL
            else:
                self.next_epoch = 1 if self.next_epoch >= _MAX_EPOCH \
                    else self.next_epoch + 1
        else:
            self.session_id = session_id
            self.next_epoch = 1 if session_id else FetchSessionEpoch.INITIAL
        return True

    def failed(self) -> None:
        """The Fetch got no answer (connection lost, timed out): whether the broker
        applied it is unknown, so the next one is full."""
        self.next_epoch = FetchSessionEpoch.INITIAL

    def closing_epoch(self) -> Optional[Tuple[int, int]]:
        """(session id, FetchSessionEpoch.FINAL) for a last Fetch that closes the session on the
        broker, or None when there is none to close."""
        if self.session_id == 0 or self.disabled:
            return None
        return self.session_id, FetchSessionEpoch.FINAL
