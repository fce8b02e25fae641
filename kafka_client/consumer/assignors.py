"""The consumer protocol's embedded bytes and the partition assignors.

Two halves:

* **Codec** — what a consumer puts in JoinGroup's protocol metadata (a
  :class:`Subscription`) and what the leader hands out through SyncGroup (an
  :class:`Assignment`). On the wire each is an int16 version followed by the
  ``ConsumerProtocolSubscription`` / ``ConsumerProtocolAssignment`` struct at that version:
  the generated classes, framed by :func:`kafka_proto.framing.encode_version_prefixed` /
  :func:`~kafka_proto.framing.decode_version_prefixed`; this module only converts them to
  and from its dataclasses. Decoding follows the Java client: a blob written at a version
  newer than we know is read as our newest version (later versions only append fields),
  and bytes after the fields we know are ignored. Malformed bytes raise
  :class:`kafka_proto.errors.ProtocolDecodeError` (or one of its subclasses:
  ``TruncatedDataError``, ``InvalidLengthError``), never anything else for a bytes-like
  input.

* **Assignors** — ``range``, ``roundrobin`` (eager) and ``cooperative-sticky``
  (cooperative, KIP-429), the names librdkafka and the Java client use in
  ``partition.assignment.strategy``. The group leader calls :meth:`Assignor.assign` with
  every member's decoded subscription and the partition count of each topic it could find
  in the metadata; topics without metadata are left out of the assignment.

Member order (range, roundrobin, and every tie-break in cooperative-sticky) is the Java
client's: members with a ``group.instance.id`` (static members) first, ordered by it, then
dynamic members ordered by member id; strings compare as Java's ``String.compareTo`` does
(UTF-16 code units). Topics are ordered the same way.
"""
from __future__ import annotations

import heapq
import struct
from collections import defaultdict
from dataclasses import dataclass, field
from typing import (
    Any,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Set,
    Tuple,
    Union,
)

from kafka_proto.framing import decode_version_prefixed, encode_version_prefixed
from kafka_proto.messages import ConsumerProtocolAssignment, ConsumerProtocolSubscription

__all__ = [
    "TP",
    "Subscription",
    "Assignment",
    "MemberSubscription",
    "encode_subscription",
    "decode_subscription",
    "encode_assignment",
    "decode_assignment",
    "Assignor",
    "RangeAssignor",
    "RoundRobinAssignor",
    "CooperativeStickyAssignor",
    "ASSIGNOR_NAMES",
    "get_assignor",
]

#: A topic partition as (topic, partition).
TP = Tuple[str, int]

SUBSCRIPTION_MAX_VERSION: int = ConsumerProtocolSubscription.MAX_VERSION
ASSIGNMENT_MAX_VERSION: int = ConsumerProtocolAssignment.MAX_VERSION


# --------------------------------------------------------------------------------------
# Codec


@dataclass
class Subscription:
    """One member's subscription, as carried in JoinGroup's protocol metadata.

    ``owned_partitions`` (v1+) lists what the member holds now (cooperative protocol),
    ``generation_id`` (v2+) the generation it got them in (-1: none), ``rack_id`` (v3+)
    its ``client.rack``. Fields a version lacks are dropped when encoding at it.
    """

    topics: List[str]
    user_data: Optional[bytes] = None
    owned_partitions: List[TP] = field(default_factory=list)
    generation_id: int = -1
    rack_id: Optional[str] = None


@dataclass
class Assignment:
    """What the leader gives one member, as carried in SyncGroup."""

    partitions: List[TP]
    user_data: Optional[bytes] = None


@dataclass(frozen=True)
class MemberSubscription:
    """A group member as the leader sees it: ids and decoded subscription."""

    member_id: str
    group_instance_id: Optional[str]
    subscription: Subscription


def _grouped(partitions: Iterable[TP], cls: type) -> list:
    """(topic, partition) pairs as one struct per topic, topics in order of first sight."""
    by_topic: Dict[str, Any] = {}      # the cls structs
    for topic, partition in partitions:
        entry = by_topic.get(topic)
        if entry is None:
            entry = by_topic[topic] = cls(topic=topic, partitions=[])
        entry.partitions.append(partition)
    return list(by_topic.values())


def _flat(entries: Iterable) -> List[TP]:
    return [(e.topic, p) for e in entries for p in e.partitions]


def encode_subscription(sub: Subscription, version: int = SUBSCRIPTION_MAX_VERSION) -> bytes:
    """Encode a subscription as JoinGroup protocol metadata: int16 version + struct.

    Owned partitions are grouped by topic in order of first appearance. Raises
    ``UnsupportedVersionError`` for a version outside 0-3 and ``ProtocolEncodeError`` for
    values the wire cannot carry.
    """
    msg = ConsumerProtocolSubscription(
        topics=list(sub.topics),
        user_data=sub.user_data,
        owned_partitions=_grouped(sub.owned_partitions,
                                  ConsumerProtocolSubscription.TopicPartition),
        generation_id=sub.generation_id,
        rack_id=sub.rack_id,
    )
    return encode_version_prefixed(msg, version)


def decode_subscription(data: Union[bytes, bytearray, memoryview]) -> Subscription:
    """Decode JoinGroup protocol metadata written by any consumer.

    Fields the blob's version lacks take their defaults. Raises
    :class:`~kafka_proto.errors.ProtocolDecodeError` (or a subclass) for malformed bytes.
    """
    msg = decode_version_prefixed(ConsumerProtocolSubscription, data)
    return Subscription(
        topics=msg.topics,
        user_data=msg.user_data,
        owned_partitions=_flat(msg.owned_partitions),
        generation_id=msg.generation_id,
        rack_id=msg.rack_id,
    )


def encode_assignment(assignment: Union[Assignment, Sequence[TP]],
                      version: int = ASSIGNMENT_MAX_VERSION) -> bytes:
    """Encode an assignment (or a bare list of (topic, partition)) for SyncGroup.

    Partitions are grouped by topic in order of first appearance. Every version has the
    same layout, so the default (3) is read by consumers that know only version 0.
    """
    if not isinstance(assignment, Assignment):
        assignment = Assignment(list(assignment))
    msg = ConsumerProtocolAssignment(
        assigned_partitions=_grouped(assignment.partitions,
                                     ConsumerProtocolAssignment.TopicPartition),
        user_data=assignment.user_data,
    )
    return encode_version_prefixed(msg, version)


def decode_assignment(data: Union[bytes, bytearray, memoryview]) -> Assignment:
    """Decode a SyncGroup assignment. Raises ``ProtocolDecodeError`` for malformed bytes."""
    msg = decode_version_prefixed(ConsumerProtocolAssignment, data)
    return Assignment(partitions=_flat(msg.assigned_partitions),
                      user_data=msg.user_data)


# --------------------------------------------------------------------------------------
# Ordering shared by the assignors


def _java_order(s: str) -> bytes:
    """Sort key comparing strings like Java's String.compareTo (UTF-16 code units)."""
    return s.encode("utf-16-be", "surrogatepass")


def _member_key(m: MemberSubscription) -> tuple:
    # Java's MemberInfo order: static members first by instance id, then by member id.
    # The member id also breaks the (invalid) tie of two equal instance ids.
    if m.group_instance_id is not None:
        return (0, _java_order(m.group_instance_id), _java_order(m.member_id))
    return (1, _java_order(m.member_id))


def _sorted_members(members: Mapping[str, MemberSubscription]) -> List[str]:
    return sorted(members, key=lambda mid: _member_key(members[mid]))


def _subscribers(order: List[str], members: Mapping[str, MemberSubscription],
                 partitions_per_topic: Mapping[str, int]) -> Dict[str, List[str]]:
    """Topic -> members subscribed to it (in member order), for topics with partitions,
    topics in order."""
    subs: Dict[str, List[str]] = {}
    for mid in order:
        for topic in set(members[mid].subscription.topics):
            if partitions_per_topic.get(topic, 0) > 0:
                subs.setdefault(topic, []).append(mid)
    return {topic: subs[topic] for topic in sorted(subs, key=_java_order)}


# --------------------------------------------------------------------------------------
# Assignors


class Assignor:
    """A partition assignment strategy, run by the group leader.

    ``name`` is the protocol name sent in JoinGroup, ``rebalance_protocol`` "EAGER" (members
    give up everything before a rebalance) or "COOPERATIVE" (members keep what they own and
    give up only what the leader moves away, KIP-429), ``version`` the subscription version
    a member sends.
    """

    name: str = ""
    rebalance_protocol: str = "EAGER"
    version: int = SUBSCRIPTION_MAX_VERSION

    def subscription_user_data(self, topics: Sequence[str],
                               owned: Sequence[TP]) -> Optional[bytes]:
        """Assignor-specific bytes for the member's subscription (none for ours)."""
        return None

    def assign(self, members: Mapping[str, MemberSubscription],
               partitions_per_topic: Mapping[str, int]) -> Dict[str, List[TP]]:
        """Map every member id to its partitions (possibly none), sorted.

        ``members`` is keyed by member id; ``partitions_per_topic`` gives the partition
        count of each subscribed topic found in the metadata.
        """
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class RangeAssignor(Assignor):
    """Per topic, contiguous ranges of partitions over the members subscribed to it.

    With P partitions and N members (in member order), each gets P // N and the first
    P % N get one more: member i starts at i * (P // N) + min(i, P % N).
    """

    name = "range"

    def assign(self, members: Mapping[str, MemberSubscription],
               partitions_per_topic: Mapping[str, int]) -> Dict[str, List[TP]]:
        order = _sorted_members(members)
        result: Dict[str, List[TP]] = {mid: [] for mid in order}
        for topic, subs in _subscribers(order, members, partitions_per_topic).items():
            count = partitions_per_topic[topic]
            share, extra = divmod(count, len(subs))
            for i, mid in enumerate(subs):
                start = i * share + min(i, extra)
                end = start + share + (1 if i < extra else 0)
                result[mid].extend((topic, p) for p in range(start, end))
        for parts in result.values():
            parts.sort()
        return result


class RoundRobinAssignor(Assignor):
    """All partitions of all subscribed topics, sorted by (topic, partition), dealt out in
    turn over the members in member order; a member not subscribed to a partition's topic
    is skipped (its turn passes to the next one)."""

    name = "roundrobin"

    def assign(self, members: Mapping[str, MemberSubscription],
               partitions_per_topic: Mapping[str, int]) -> Dict[str, List[TP]]:
        order = _sorted_members(members)
        result: Dict[str, List[TP]] = {mid: [] for mid in order}
        subs = _subscribers(order, members, partitions_per_topic)
        topics_of = {mid: set(members[mid].subscription.topics) for mid in order}
        turn = 0
        for topic in sorted(subs, key=_java_order):
            for p in range(partitions_per_topic[topic]):
                while topic not in topics_of[order[turn]]:
                    turn = (turn + 1) % len(order)
                result[order[turn]].append((topic, p))
                turn = (turn + 1) % len(order)
        for parts in result.values():
            parts.sort()
        return result


def _generation(sub: Subscription) -> int:
    """A member's generation: the v2+ field, else the Java cooperative-sticky user data
    (exactly one int32), else -1."""
    if sub.generation_id >= 0:
        return sub.generation_id
    if sub.user_data is not None and len(sub.user_data) == 4:
        return struct.unpack(">i", sub.user_data)[0]
    return -1


class _Holder:
    """A member during a sticky assignment: what it keeps and what it is newly given."""

    __slots__ = ("mid", "rank", "topics", "load", "kept", "fresh")

    def __init__(self, mid: str, rank: int, topics: Set[str]) -> None:
        self.mid = mid
        self.rank = rank
        self.topics = topics
        self.load = 0
        self.kept: Dict[str, List[int]] = {}   # topic -> partitions it owned before
        self.fresh: Dict[str, List[int]] = {}  # topic -> partitions new to it

    def give(self, topic: str, partition: int, mine: bool = False) -> None:
        (self.kept if mine else self.fresh).setdefault(topic, []).append(partition)
        self.load += 1

    def take(self, topic: str) -> int:
        """Remove one partition of topic, a new one before one it owned before."""
        table = self.fresh if topic in self.fresh else self.kept
        parts = table[topic]
        partition = parts.pop()
        if not parts:
            del table[topic]
        self.load -= 1
        return partition

    def held_topics(self) -> Iterable[str]:
        yield from self.fresh
        yield from self.kept


class CooperativeStickyAssignor(Assignor):
    """Balanced, sticky assignment for the cooperative protocol (KIP-429, KIP-341).

    1. **Ownership.** Each member's ``owned_partitions`` are its claims. A partition
       claimed by several members stays with the one of strictly highest generation; if
       the highest generation is shared it is owned by none (as in the Java client). A
       member keeps an owned partition only if the topic still exists, the partition
       number is in range, and the member still subscribes to the topic.
    2. **Fill.** Unowned partitions go, topic by topic (topics with the fewest subscribers
       first), each to the subscribed member with the fewest partitions so far.
    3. **Balance.** While some member A could pass partitions along a chain
       A -> B -> ... -> Z (each step a partition of a topic the next member subscribes to)
       to a member Z holding at least two fewer than A, do so: A is the member holding
       the most, the chain the shortest, Z among the nearest the one holding the fewest,
       and a member passes on a partition new to it before one it owned. With equal
       subscriptions this ends with member counts differing by at most one and moves no
       more owned partitions than that balance needs. In general it ends when no such
       chain is left, which is the optimality condition of semi-matchings (Harvey, Ladner,
       Lovász, Tamir): no assignment has a smaller largest member count. A second run over
       its own result moves nothing.
    4. **Cooperative rule.** A partition assigned to a member that did not claim it while
       another member did is left out of this round: its owner revokes it, rejoins, and
       the next rebalance hands it over. (A partition assigned to one of its claimants is
       not held back, as in the Java client: the other claimants revoke it.)
    """

    name = "cooperative-sticky"
    rebalance_protocol = "COOPERATIVE"

    def assign(self, members: Mapping[str, MemberSubscription],
               partitions_per_topic: Mapping[str, int]) -> Dict[str, List[TP]]:
        order = _sorted_members(members)
        subs_of_topic = _subscribers(order, members, partitions_per_topic)
        holders = {
            mid: _Holder(mid, rank, set(members[mid].subscription.topics) & set(subs_of_topic))
            for rank, mid in enumerate(order)
        }
        subscribers = {t: [holders[mid] for mid in mids] for t, mids in subs_of_topic.items()}

        claims = self._claims(members, order)
        owner = self._owners(claims, members)

        # 1. what each member keeps
        unowned: Dict[str, List[int]] = {}
        for topic in subscribers:
            for p in range(partitions_per_topic[topic]):
                mid = owner.get((topic, p))
                if mid is not None and topic in holders[mid].topics:
                    holders[mid].give(topic, p, mine=True)
                else:
                    unowned.setdefault(topic, []).append(p)

        # 2. fill, most constrained topics first
        for topic in sorted(unowned, key=lambda t: (len(subscribers[t]), _java_order(t))):
            heap = [(h.load, h.rank, h) for h in subscribers[topic]]
            heapq.heapify(heap)
            for p in unowned[topic]:
                _, _, h = heapq.heappop(heap)
                h.give(topic, p)
                heapq.heappush(heap, (h.load, h.rank, h))

        # 3. balance
        self._balance(list(holders.values()), subscribers)

        # 4. cooperative rule
        result: Dict[str, List[TP]] = {}
        for mid in order:
            h = holders[mid]
            parts = [(t, p) for table in (h.kept, h.fresh) for t, ps in table.items() for p in ps]
            result[mid] = sorted(tp for tp in parts
                                 if tp not in claims or mid in claims[tp])
        return result

    @staticmethod
    def _claims(members: Mapping[str, MemberSubscription],
                order: List[str]) -> Dict[TP, Set[str]]:
        claims: Dict[TP, Set[str]] = defaultdict(set)
        for mid in order:
            for tp in members[mid].subscription.owned_partitions:
                claims[tp].add(mid)
        return claims

    @staticmethod
    def _owners(claims: Mapping[TP, Set[str]],
                members: Mapping[str, MemberSubscription]) -> Dict[TP, str]:
        generation = {mid: _generation(m.subscription) for mid, m in members.items()}
        owner: Dict[TP, str] = {}
        for tp, claimants in claims.items():
            best = max(generation[mid] for mid in claimants)
            top = [mid for mid in claimants if generation[mid] == best]
            if len(top) == 1:
                owner[tp] = top[0]
        return owner

    @staticmethod
    def _balance(holders: List[_Holder], subscribers: Mapping[str, List[_Holder]]) -> None:
        # A failed search from X proves every member it reached (all closed under "can
        # pass to") is stuck while its holdings stay the same: skip them until a chain
        # passes through one of them.
        stuck: Set[str] = set()
        while True:
            low = min((h.load for h in holders), default=0)
            candidates = [h for h in holders if h.mid not in stuck and h.load - low >= 2]
            if not candidates:
                return
            start = min(candidates, key=lambda h: (-h.load, h.rank))
            path, seen = _find_chain(start, subscribers)
            if path is None:
                stuck.update(h.mid for h in seen if h.load <= start.load)
                continue
            if stuck and any(h.mid in stuck for h, _ in path):
                stuck.clear()
            for (giver, topic), (taker, _) in zip(path, path[1:]):
                taker.give(topic, giver.take(topic))


def _find_chain(start: _Holder, subscribers: Mapping[str, List[_Holder]]
                ) -> Tuple[Optional[List[Tuple[_Holder, str]]], Iterable[_Holder]]:
    """Breadth-first search for the shortest chain from start to a member holding at
    least two fewer partitions; among the ends that are equally near, the one holding
    the fewest (then first in member order).

    Returns ([(member, topic it passes on), ...], visited), the last entry's topic unused,
    or (None, visited) when there is no such chain.
    """
    limit = start.load - 2
    came_from: Dict[str, Tuple[_Holder, Optional[_Holder], str]] = {
        start.mid: (start, None, "")}
    expanded: Set[str] = set()
    level = [start]
    while level:
        best: Optional[_Holder] = None
        following: List[_Holder] = []
        for x in level:
            for topic in x.held_topics():
                if topic in expanded:
                    continue  # its subscribers are reached already
                expanded.add(topic)
                for y in subscribers[topic]:
                    if y.mid in came_from:
                        continue
                    came_from[y.mid] = (y, x, topic)
                    following.append(y)
                    if y.load <= limit and (
                            best is None or (y.load, y.rank) < (best.load, best.rank)):
                        best = y
        if best is not None:
            path: List[Tuple[_Holder, str]] = [(best, "")]
            _, node, via = came_from[best.mid]
            while node is not None:
                path.append((node, via))
                _, node, via = came_from[node.mid]
            path.reverse()
            return path, ()
        level = following
    return None, [entry[0] for entry in came_from.values()]


_ASSIGNORS = {cls.name: cls for cls in (RangeAssignor, RoundRobinAssignor,
                                        CooperativeStickyAssignor)}

#: The assignor names this client knows.
ASSIGNOR_NAMES: Tuple[str, ...] = tuple(_ASSIGNORS)


def get_assignor(name: str) -> Assignor:
    """A new assignor by protocol name ("range", "roundrobin", "cooperative-sticky").

    Raises ValueError naming the unknown name and the known ones.
    """
    cls = _ASSIGNORS.get(name.strip())
    if cls is None:
        raise ValueError(f"unknown partition assignor {name!r} "
                         f"(known: {', '.join(ASSIGNOR_NAMES)})")
    return cls()
