"""Well-framed broker answers with inconsistent contents, sent through the fault proxy
(``FaultProxy.rewrite_responses``) in front of the test cluster: the client neither
spins, hangs, nor loses or repeats messages."""
from __future__ import annotations

import logging
import time
from collections import Counter
from typing import Any, List, Tuple

import pytest

from kafka_client import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from kafka_proto.errors import ErrorCode
from kafka_proto.messages import ApiKey

from fill_and_read import assigning_an_unknown_topic, fill, read  # fill_and_read.py beside

pytestmark = pytest.mark.integration


def test_a_kip848_assignment_naming_a_topic_id_nobody_knows(proxied_cluster, topic_name):
    """Every ConsumerGroupHeartbeat answer also assigns two partitions of a topic id that
    no metadata names (a topic deleted meanwhile; a broken coordinator). The partitions
    that can be resolved are taken and read at once, the metadata is asked again at the
    pace of a fast refresh; the member used to wait for the whole assignment, asking for
    the metadata again on every answer: 8,900 Metadata requests in 10 s and nothing read
    (librdkafka reads the known partitions)."""
    cluster, proxy = proxied_cluster
    cluster.create_topic(topic_name, partitions=3)
    fill(proxy.bootstrap, topic_name, 30)

    proxy.rewrite_responses(ApiKey.CONSUMER_GROUP_HEARTBEAT,
                            assigning_an_unknown_topic([0, 1]), count=None)
    since = cluster.clear_request_log()
    consumer = Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": topic_name,
                         "group.protocol": "consumer", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic_name])
        started = time.monotonic()
        seen = read(consumer, 30, 15)
        assert len(seen) == 30 and max(seen.values()) == 1
        assert sorted(tp.partition for tp in consumer.assignment()) == [0, 1, 2]
        read(consumer, 1, 2)            # two seconds more of heartbeats
        elapsed = time.monotonic() - started
    finally:
        consumer.close()
    metadata = len(cluster.request_log(since=since, api="Metadata"))
    assert metadata <= 12 * elapsed + 5, (metadata, elapsed)
    assert proxy.injected > 0 and not proxy.rewrite_errors


class _Kept(logging.Handler):
    def __init__(self, kept: List[str]) -> None:
        super().__init__(logging.WARNING)
        self.kept = kept

    def emit(self, record: logging.LogRecord) -> None:
        self.kept.append(record.getMessage())


def warning_logger(name: str) -> Tuple[logging.Logger, List[str]]:
    """A logger for a client's ``logger`` property, and the warnings it gets."""
    kept: List[str] = []
    logger = logging.getLogger(f"test.hostile.{name}")
    logger.addHandler(_Kept(kept))
    return logger, kept


def poll_events(consumer: Consumer, seconds: float) -> Tuple[Counter, List[Any]]:
    """Messages read (value: count) and error events, polled for ``seconds``."""
    seen: Counter = Counter()
    events: List[Any] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        msg = consumer.poll(0.1)
        if msg is None:
            continue
        if msg.error():
            events.append(msg)
        else:
            seen[msg.value()] += 1
    return seen, events


def test_a_list_offsets_answer_with_a_negative_offset_and_no_error(proxied_cluster,
                                                                   topic_name):
    """Every ListOffsets answer says offset -5 and no error. The lookup is retried (at
    retry.backoff.ms) and each partition gets one error event saying so, not one per
    retry; it used to retry for ever without a word (librdkafka 2.16 does too, and asks
    tens of thousands of times a second). Once the answers are sound the messages come."""
    cluster, proxy = proxied_cluster
    cluster.create_topic(topic_name, partitions=2)
    fill(proxy.bootstrap, topic_name, 20)

    def negative_offset(response, version):
        for t in response.topics:
            for p in t.partitions:
                if not p.error_code:
                    p.offset = -5

    proxy.rewrite_responses(ApiKey.LIST_OFFSETS, negative_offset, count=None)
    since = cluster.clear_request_log()
    consumer = Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": topic_name,
                         "retry.backoff.ms": 50})
    try:
        consumer.assign([TopicPartition(topic_name, p, OFFSET_BEGINNING) for p in (0, 1)])
        seen, events = poll_events(consumer, 2.5)
        assert not seen
        lookups = len(cluster.request_log(since=since, api="ListOffsets"))
        assert lookups >= 6, lookups                  # still retried
        assert sorted(e.partition() for e in events) == [0, 1], events
        assert {e.error().code() for e in events} == {KafkaError._BAD_MSG}
        assert "offset -5" in events[0].error().str()
        proxy.clear_faults()
        assert read(consumer, 20, 10) == Counter(str(i).encode() for i in range(20))
    finally:
        consumer.close()
    assert proxy.injected > 0 and not proxy.rewrite_errors


def test_an_offset_for_leader_epoch_answer_leaving_the_partitions_out(proxied_cluster,
                                                                      topic_name):
    """After a leader change (the metadata shows a new leader epoch) every
    OffsetForLeaderEpoch answer leaves the partitions out. Each partition gets one error
    event and one warning, while the check is retried; it used to be retried for ever
    with nothing above an info line per retry (librdkafka 2.16 says nothing at all).
    Once the answers are sound the partitions are read on from their positions."""
    cluster, proxy = proxied_cluster
    cluster.create_topic(topic_name, partitions=2)
    fill(proxy.bootstrap, topic_name, 20, partitions=2)   # a leader epoch for each
    logger, warnings = warning_logger(topic_name)
    consumer = Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": topic_name,
                         "fetch.error.backoff.ms": 50, "logger": logger})
    try:
        consumer.assign([TopicPartition(topic_name, p, 0) for p in (0, 1)])
        assert len(read(consumer, 20, 10)) == 20

        since = cluster.clear_request_log()
        proxy.rewrite_responses(ApiKey.OFFSET_FOR_LEADER_EPOCH,
                                lambda response, version: setattr(response, "topics", []),
                                count=None)
        for p in (0, 1):     # elected again: a new leader epoch, the same broker
            cluster.move_leader(topic_name, p, to=cluster.broker_ids[0])
        seen, events = poll_events(consumer, 3)
        assert not seen
        checks = len(cluster.request_log(since=since, api="OffsetForLeaderEpoch"))
        assert checks >= 6, checks                  # still retried
        assert sorted(e.partition() for e in events) == [0, 1], events
        assert {e.error().code() for e in events} == {KafkaError._BAD_MSG}
        left_out = [w for w in warnings if "left the partition out" in w]
        assert len(left_out) == 2, warnings
        proxy.clear_faults()
        fill(proxy.bootstrap, topic_name, 20, partitions=2)
        assert len(read(consumer, 20, 10)) == 20
    finally:
        consumer.close()
    assert proxy.injected > 0 and not proxy.rewrite_errors


def test_a_join_group_answer_with_a_negative_generation_and_no_error(proxied_cluster,
                                                                     topic_name):
    """Every successful JoinGroup answer says generation -5. The member reports it once
    and keeps trying to join; it used to take the generation, have its SyncGroup refused
    (ILLEGAL_GENERATION) and join again ten times a second without a word (librdkafka
    2.16 the same, over a thousand times a second). Once the answers are sound it joins
    and reads."""
    cluster, proxy = proxied_cluster
    cluster.create_topic(topic_name, partitions=2)
    fill(proxy.bootstrap, topic_name, 20)

    def no_generation(response, version):
        if not response.error_code:
            response.generation_id = -5

    proxy.rewrite_responses(ApiKey.JOIN_GROUP, no_generation, count=None)
    since = cluster.clear_request_log()
    consumer = Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": topic_name,
                         "auto.offset.reset": "earliest", "retry.backoff.ms": 50,
                         "retry.backoff.max.ms": 200})
    try:
        consumer.subscribe([topic_name])
        seen, events = poll_events(consumer, 3.5)
        assert not seen and consumer.assignment() == []
        joins = len(cluster.request_log(since=since, api="JoinGroup"))
        assert joins >= 3, joins                      # still trying
        assert len(cluster.request_log(since=since, api="SyncGroup")) == 0
        assert [e.error().code() for e in events] == [KafkaError._BAD_MSG], events
        assert "generation -5" in events[0].error().str()
        proxy.clear_faults()
        assert read(consumer, 20, 15) == Counter(str(i).encode() for i in range(20))
    finally:
        consumer.close()
    assert proxy.injected > 0 and not proxy.rewrite_errors


def test_a_fetch_refused_as_a_whole(proxied_cluster, topic_name):
    """Every Fetch answer is a top-level UNKNOWN_SERVER_ERROR and no partitions (as a
    Kafka broker answers a Fetch v13+ it refuses whole). Each partition fetched gets one
    error event saying so, and is fetched again after fetch.error.backoff.ms; the
    refusal was only a warning in the log per answer, never told to the application
    (librdkafka 2.16 tells nothing either when the answer names no partition, and an
    event at every answer when it does). Once the answers are sound the messages come."""
    cluster, proxy = proxied_cluster
    cluster.create_topic(topic_name, partitions=2)
    fill(proxy.bootstrap, topic_name, 20, partitions=2)

    def refused(response, version):
        response.error_code = ErrorCode.UNKNOWN_SERVER_ERROR
        response.responses = []

    proxy.rewrite_responses(ApiKey.FETCH, refused, count=None)
    since = cluster.clear_request_log()
    consumer = Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": topic_name,
                         "fetch.error.backoff.ms": 200})
    try:
        consumer.assign([TopicPartition(topic_name, p, 0) for p in (0, 1)])
        seen, events = poll_events(consumer, 3)
        assert not seen
        fetches = len(cluster.request_log(since=since, api="Fetch"))
        assert 3 <= fetches <= 3 / 0.2 + 3, fetches          # retried, backing off
        assert sorted(e.partition() for e in events) == [0, 1], events
        assert {e.error().code() for e in events} == {KafkaError.UNKNOWN}
        assert {e.offset() for e in events} == {0}
        proxy.clear_faults()
        assert read(consumer, 20, 10) == Counter(str(i).encode() for i in range(20))
    finally:
        consumer.close()
    assert proxy.injected > 0 and not proxy.rewrite_errors


def test_a_group_id_that_is_not_utf8_in_a_list_groups_answer(proxied_cluster):
    """A broker that keeps a client's group id as raw bytes (not Kafka: it reads and
    writes Java strings) lists one that is not UTF-8. The listing is read as Kafka's
    own readers read it, the bad bytes as U+FFFD, and the other groups come too; the
    whole answer failed to decode before, and list_consumer_groups() with it."""
    from kafka_client.admin import AdminClient

    cluster, proxy = proxied_cluster

    def two_groups(response, version):
        listed = type(response).ListedGroup
        response.groups = [listed(group_id=g, protocol_type="consumer", group_state="Empty",
                                  group_type="classic") for g in ("plain-group", "bad-gr-XYZ")]
        return response.encode(version).replace(b"bad-gr-XYZ", b"bad-gr-\xff\xfe\xc3")

    proxy.rewrite_responses(ApiKey.LIST_GROUPS, two_groups, count=None)
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
    result = admin.list_consumer_groups(request_timeout=10).result(timeout=20)
    assert sorted(g.group_id for g in result.valid) == ["bad-gr-\ufffd\ufffd\ufffd",
                                                         "plain-group"]
    assert not result.errors
    assert proxy.injected > 0 and not proxy.rewrite_errors
