"""Retries against a broker that keeps failing the same way back off as KIP-580 has it
(``retry.backoff.ms`` doubling up to ``retry.backoff.max.ms``, with jitter), as the Java
client and librdkafka 2.x do, rather than asking at a flat ``retry.backoff.ms``. The
requests are counted at the test cluster's request log behind the fault proxy."""
from __future__ import annotations

import time
from collections import Counter
from typing import List

import pytest

from kafka_client import (
    OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition)
from kafka_proto.errors import ErrorCode
from kafka_proto.messages import ApiKey

from fill_and_read import assigning_an_unknown_topic, fill, read  # fill_and_read.py beside

pytestmark = pytest.mark.integration

#: short backoffs, so that a flat retry makes many requests in a few seconds:
#: 20 ms flat is about 50 a second; doubling up to 400 ms, about 2.5 a second
FAST_BACKOFF = {"retry.backoff.ms": 20, "retry.backoff.max.ms": 400}
#: how long each failure lasts (s), and the most requests KIP-580's waits allow in it
#: (20+40+...+320 ms, then one per 400 ms +20% jitter either way: about 13)
FAILING_FOR = 4.0
MOST_REQUESTS = 20


def poll_for(consumer: Consumer, seconds: float) -> List[KafkaError]:
    """Poll for ``seconds``; the error events returned meanwhile."""
    events = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        msg = consumer.poll(0.1)
        if msg is not None and msg.error():
            events.append(msg.error())
    return events


@pytest.mark.parametrize("api", [ApiKey.FIND_COORDINATOR, ApiKey.JOIN_GROUP])
def test_a_group_whose_coordinator_keeps_failing_backs_off(proxied_cluster, topic_name, api):
    """FindCoordinator (or JoinGroup) answered COORDINATOR_LOAD_IN_PROGRESS, again and
    again: the member asked every retry.backoff.ms, 200 times in 4 s here. Now the waits
    double up to retry.backoff.max.ms, and the member joins and reads once the
    coordinator answers."""
    cluster, proxy = proxied_cluster
    cluster.create_topic(topic_name, partitions=1)
    fill(proxy.bootstrap, topic_name, 10)
    if api == ApiKey.JOIN_GROUP:
        def loading(response, version):
            # KIP-394's first answer passes: a member the broker made and we never
            # heard of would hold up the rebalance afterwards until it expired.
            if response.error_code != ErrorCode.MEMBER_ID_REQUIRED:
                response.error_code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        proxy.rewrite_responses(api, loading, count=None)
    else:
        proxy.fail_requests(api, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, count=100_000)
    since = cluster.clear_request_log()
    consumer = Consumer(dict(FAST_BACKOFF, **{
        "bootstrap.servers": proxy.bootstrap, "group.id": topic_name,
        "auto.offset.reset": "earliest"}))
    try:
        consumer.subscribe([topic_name])
        poll_for(consumer, FAILING_FOR)
        asked = len(cluster.request_log(since=since, api=int(api)))
        assert 4 <= asked <= MOST_REQUESTS, asked
        proxy.clear_faults()
        assert len(read(consumer, 10, 10)) == 10
    finally:
        consumer.close()
    assert not proxy.rewrite_errors


def test_a_kip848_assignment_of_an_unknown_topic_id_backs_off(proxied_cluster, topic_name):
    """Every ConsumerGroupHeartbeat answer also assigns a topic id no metadata names. The
    known partitions are read; the metadata was asked again at the fast refresh's flat
    pace (retry.backoff.ms), now with waits that double up to retry.backoff.max.ms."""
    cluster, proxy = proxied_cluster
    cluster.create_topic(topic_name, partitions=2)
    fill(proxy.bootstrap, topic_name, 10)

    proxy.rewrite_responses(ApiKey.CONSUMER_GROUP_HEARTBEAT,
                            assigning_an_unknown_topic([0]), count=None)
    consumer = Consumer(dict(FAST_BACKOFF, **{
        "bootstrap.servers": proxy.bootstrap, "group.id": topic_name,
        "group.protocol": "consumer", "auto.offset.reset": "earliest"}))
    try:
        consumer.subscribe([topic_name])
        assert len(read(consumer, 10, 10)) == 10
        since = cluster.clear_request_log()
        poll_for(consumer, FAILING_FOR)
        asked = len(cluster.request_log(since=since, api="Metadata"))
        assert asked <= MOST_REQUESTS, asked
    finally:
        consumer.close()
    assert proxy.injected > 0 and not proxy.rewrite_errors


@pytest.mark.parametrize("api", [ApiKey.OFFSET_FETCH, ApiKey.OFFSET_COMMIT])
def test_offset_requests_the_coordinator_keeps_refusing_back_off(proxied_cluster,
                                                                  topic_name, api):
    """committed() or commit() while the coordinator answers COORDINATOR_LOAD_IN_PROGRESS
    for 4 s: the request was asked again every retry.backoff.ms until its deadline, now
    with waits that double; it succeeds once the coordinator answers."""
    cluster, proxy = proxied_cluster
    cluster.create_topic(topic_name, partitions=1)
    tp = TopicPartition(topic_name, 0, 5)
    consumer = Consumer(dict(FAST_BACKOFF, **{
        "bootstrap.servers": proxy.bootstrap, "group.id": topic_name,
        "enable.auto.commit": False,
        # a synchronous commit's deadline (librdkafka's: the request timeout)
        "socket.timeout.ms": int(FAILING_FOR * 1000)}))
    try:
        consumer.commit(offsets=[tp], asynchronous=False)   # the coordinator is known
        proxy.fail_requests(api, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, count=100_000)
        since = cluster.clear_request_log()
        started = time.monotonic()
        with pytest.raises(KafkaException):
            if api == ApiKey.OFFSET_FETCH:
                consumer.committed([tp], timeout=FAILING_FOR)
            else:
                consumer.commit(offsets=[TopicPartition(topic_name, 0, 7)],
                                asynchronous=False)
        poll_for(consumer, FAILING_FOR - (time.monotonic() - started))
        asked = len(cluster.request_log(since=since, api=int(api)))
        assert 4 <= asked <= MOST_REQUESTS, asked
        proxy.clear_faults()
        consumer.commit(offsets=[TopicPartition(topic_name, 0, 9)], asynchronous=False)
        assert consumer.committed([tp], timeout=10)[0].offset == 9
    finally:
        consumer.close()


def test_an_offset_lookup_the_leader_keeps_refusing_backs_off(proxied_cluster, topic_name):
    """auto.offset.reset's ListOffsets answered OFFSET_NOT_AVAILABLE (retriable), again and
    again: it was asked every retry.backoff.ms, now with waits that double; the partition
    is read once the leader answers."""
    cluster, proxy = proxied_cluster
    cluster.create_topic(topic_name, partitions=1)
    fill(proxy.bootstrap, topic_name, 10)
    proxy.fail_requests(ApiKey.LIST_OFFSETS, ErrorCode.OFFSET_NOT_AVAILABLE, count=100_000)
    since = cluster.clear_request_log()
    consumer = Consumer(dict(FAST_BACKOFF, **{
        "bootstrap.servers": proxy.bootstrap, "group.id": topic_name}))
    try:
        consumer.assign([TopicPartition(topic_name, 0, OFFSET_BEGINNING)])
        poll_for(consumer, FAILING_FOR)
        asked = len(cluster.request_log(since=since, api="ListOffsets"))
        assert 4 <= asked <= MOST_REQUESTS, asked
        proxy.clear_faults()
        assert len(read(consumer, 10, 10)) == 10
    finally:
        consumer.close()


def test_adding_partitions_to_a_transaction_the_coordinator_keeps_refusing_backs_off(
        proxied_cluster, topic_name):
    """AddPartitionsToTxn answered COORDINATOR_LOAD_IN_PROGRESS for 4 s: the producer asked
    again every retry.backoff.ms, now with waits that double; the transaction commits
    once the coordinator answers, and its message is read."""
    cluster, proxy = proxied_cluster
    cluster.create_topic(topic_name, partitions=1)
    producer = Producer(dict(FAST_BACKOFF, **{
        "bootstrap.servers": proxy.bootstrap, "transactional.id": topic_name}))
    try:
        producer.init_transactions(10)
        proxy.fail_requests(ApiKey.ADD_PARTITIONS_TO_TXN,
                            ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, count=100_000)
        since = cluster.clear_request_log()
        producer.begin_transaction()
        producer.produce(topic_name, b"in the transaction")
        deadline = time.monotonic() + FAILING_FOR
        while time.monotonic() < deadline:
            producer.poll(0.1)
        asked = len(cluster.request_log(since=since, api="AddPartitionsToTxn"))
        assert 4 <= asked <= MOST_REQUESTS, asked
        proxy.clear_faults()
        producer.commit_transaction(10)
    finally:
        producer.close()
    consumer = Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": topic_name,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    try:
        consumer.assign([TopicPartition(topic_name, 0, OFFSET_BEGINNING)])
        assert read(consumer, 1, 10) == Counter([b"in the transaction"])
    finally:
        consumer.close()


def test_kip848_heartbeats_the_coordinator_keeps_answering_badly_back_off(
        proxied_cluster, topic_name):
    """Every ConsumerGroupHeartbeat answer has no error but member epoch 0 (no member has
    it): the member asked again every retry.backoff.ms and gave the application an error
    event each time; now the waits double (as the Java client's heartbeat does, KIP-580),
    one event says it, and the member joins and reads once the answers are sound."""
    cluster, proxy = proxied_cluster
    cluster.create_topic(topic_name, partitions=1)
    fill(proxy.bootstrap, topic_name, 10)

    def no_epoch(response, version):
        if not response.error_code:
            response.member_epoch = 0

    proxy.rewrite_responses(ApiKey.CONSUMER_GROUP_HEARTBEAT, no_epoch, count=None)
    since = cluster.clear_request_log()
    consumer = Consumer(dict(FAST_BACKOFF, **{
        "bootstrap.servers": proxy.bootstrap, "group.id": topic_name,
        "group.protocol": "consumer", "auto.offset.reset": "earliest"}))
    try:
        consumer.subscribe([topic_name])
        events = poll_for(consumer, FAILING_FOR)
        asked = len(cluster.request_log(since=since, api="ConsumerGroupHeartbeat"))
        assert 4 <= asked <= MOST_REQUESTS, asked
        assert [e.code() for e in events] == [KafkaError._BAD_MSG], events
        proxy.clear_faults()
        assert len(read(consumer, 10, 10)) == 10
    finally:
        consumer.close()
    assert proxy.injected > 0 and not proxy.rewrite_errors


def _requests_while_answers_fail(proxied_cluster, topic_name, conf, api, code, counted):
    """A member subscribed with ``conf`` reads 10 messages; then every ``api`` answer
    without an error says ``code`` for FAILING_FOR seconds of polling; then the answers
    are sound again and the member reads 10 more. How many ``counted`` requests it made
    while they failed."""
    cluster, proxy = proxied_cluster
    cluster.create_topic(topic_name, partitions=1)
    fill(proxy.bootstrap, topic_name, 10)
    consumer = Consumer(dict(FAST_BACKOFF, **{
        "bootstrap.servers": proxy.bootstrap, "group.id": topic_name,
        "auto.offset.reset": "earliest"}, **conf))
    try:
        consumer.subscribe([topic_name])
        assert len(read(consumer, 10, 15)) == 10

        def failing(response, version):
            if not response.error_code:
                response.error_code = code

        since = cluster.clear_request_log()
        proxy.rewrite_responses(api, failing, count=None)
        poll_for(consumer, FAILING_FOR)
        asked = len(cluster.request_log(since=since, api=counted))
        proxy.clear_faults()
        fill(proxy.bootstrap, topic_name, 10)
        assert len(read(consumer, 10, 15)) == 10
    finally:
        consumer.close()
    assert proxy.injected > 0 and not proxy.rewrite_errors
    return asked


def test_a_classic_member_whose_membership_keeps_being_lost_rejoins_backing_off(
        proxied_cluster, topic_name):
    """Every Heartbeat answer says ILLEGAL_GENERATION: the member joins and syncs, then
    loses its membership at the first heartbeat, again and again. It rejoined a flat
    retry.backoff.ms after each loss (about 50 rounds in 6 s here, four times as many
    as librdkafka 2.16 makes); now the waits double as KIP-580 has it until a heartbeat
    succeeds, and the member reads once the heartbeats are answered."""
    joins = _requests_while_answers_fail(
        proxied_cluster, topic_name, {"heartbeat.interval.ms": 100, "session.timeout.ms": 6000},
        ApiKey.HEARTBEAT, ErrorCode.ILLEGAL_GENERATION, "JoinGroup")
    assert 3 <= joins <= MOST_REQUESTS, joins


@pytest.mark.parametrize("code", [ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_MEMBER_EPOCH])
def test_a_kip848_member_fenced_at_every_heartbeat_rejoins_backing_off(proxied_cluster,
                                                                       topic_name, code):
    """Every ConsumerGroupHeartbeat answer fences the member (UNKNOWN_MEMBER_ID,
    FENCED_MEMBER_EPOCH), its joins too. The member joined again at once after each:
    over 10,000 heartbeats in 6 s (librdkafka 2.16: 23). Now the first rejoin after a
    fencing is at once and the next ones wait as KIP-580 has it, until a heartbeat
    succeeds; once the answers are sound the member joins and reads."""
    asked = _requests_while_answers_fail(
        proxied_cluster, topic_name, {"group.protocol": "consumer"},
        ApiKey.CONSUMER_GROUP_HEARTBEAT, code, "ConsumerGroupHeartbeat")
    assert 3 <= asked <= MOST_REQUESTS, asked


@pytest.mark.parametrize("api,protocol", [
    (ApiKey.JOIN_GROUP, "classic"), (ApiKey.HEARTBEAT, "classic"),
    (ApiKey.CONSUMER_GROUP_HEARTBEAT, "consumer")])
def test_a_coordinator_that_keeps_answering_not_coordinator_is_told_once(
        proxied_cluster, topic_name, api, protocol):
    """FindCoordinator names the broker every time, and the broker answers every JoinGroup
    (or Heartbeat, or KIP-848 heartbeat) NOT_COORDINATOR: the member looks the
    coordinator up again and retries, backing off (KIP-580), and said nothing, however
    long it lasted (librdkafka 2.16 neither). Now the application gets one error event
    once it has lasted; the member joins and reads once the answers are sound."""
    cluster, proxy = proxied_cluster
    cluster.create_topic(topic_name, partitions=1)
    fill(proxy.bootstrap, topic_name, 10)

    def not_coordinator(response, version):
        if response.error_code != ErrorCode.MEMBER_ID_REQUIRED:   # KIP-394's first answer
            response.error_code = ErrorCode.NOT_COORDINATOR

    conf = dict(FAST_BACKOFF, **{
        "bootstrap.servers": proxy.bootstrap, "group.id": topic_name,
        "group.protocol": protocol, "auto.offset.reset": "earliest"})
    if api == ApiKey.HEARTBEAT:
        conf["heartbeat.interval.ms"] = 100
    consumer = Consumer(conf)
    try:
        if api == ApiKey.HEARTBEAT:
            consumer.subscribe([topic_name])
            assert len(read(consumer, 10, 15)) == 10
        since = cluster.clear_request_log()
        proxy.rewrite_responses(api, not_coordinator, count=None)
        if api != ApiKey.HEARTBEAT:
            consumer.subscribe([topic_name])
        events = poll_for(consumer, FAILING_FOR)
        lookups = len(cluster.request_log(since=since, api="FindCoordinator"))
        assert 4 <= lookups <= MOST_REQUESTS + 5, lookups
        assert [e.code() for e in events] == [KafkaError.NOT_COORDINATOR], events
        assert "keeps answering" in events[0].str()
        proxy.clear_faults()
        fill(proxy.bootstrap, topic_name, 10)
        assert len(read(consumer, 10, 15)) == 10
    finally:
        consumer.close()
    assert proxy.injected > 0 and not proxy.rewrite_errors
