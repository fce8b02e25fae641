"""Writing numbered messages, counting what a consumer reads back, and answers to rewrite,
for the tests that put a broker's answers through the fault proxy
(test_hostile_answers.py, test_retry_backoff.py) or stop the test cluster's brokers
(test_leader_moves.py, test_fetch_connection_loss.py)."""
from __future__ import annotations

import copy
import time
import uuid
from collections import Counter
from typing import Any, Callable, List

from kafka_client import Consumer, Producer


def fill(bootstrap: str, topic: str, count: int, partitions: int = 0) -> None:
    """``count`` messages "0", "1"...; with ``partitions``, spread over that many."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        if partitions:
            producer.produce(topic, str(i).encode(), partition=i % partitions)
        else:
            producer.produce(topic, str(i).encode())
    assert producer.flush(20) == 0
    producer.close()


def produce_numbered(bootstrap: str, topic: str, start: int, stop: int) -> None:
    """Messages "start" .. "stop - 1" to partition 0, acks=all, flushed."""
    with Producer({"bootstrap.servers": bootstrap, "acks": "all"}) as producer:
        for i in range(start, stop):
            producer.produce(topic, b"%d" % i, partition=0)
        assert producer.flush(10) == 0


def read_values(consumer: Consumer, values: List[bytes], count: int, seconds: float) -> None:
    """Append what ``consumer`` reads to ``values`` until it holds ``count``; fails the
    test after ``seconds``."""
    deadline = time.monotonic() + seconds
    while len(values) < count:
        assert time.monotonic() < deadline, f"{len(values)} of {count} read"
        values.extend(m.value() for m in consumer.consume(100, 0.05) if m.error() is None)


def read(consumer: Consumer, count: int, seconds: float) -> Counter:
    """The values ``consumer`` reads within ``seconds`` (until ``count`` distinct ones),
    each with how many times it came."""
    seen: Counter = Counter()
    deadline = time.monotonic() + seconds
    while len(seen) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.1)
        if msg is not None and not msg.error():
            seen[msg.value()] += 1
    return seen


def assigning_an_unknown_topic(partitions: List[int]) -> Callable[[Any, int], None]:
    """A rewrite of ConsumerGroupHeartbeat answers (``FaultProxy.rewrite_responses``) that
    also assigns ``partitions`` of a topic id no metadata names (a topic deleted meanwhile;
    a broken coordinator)."""
    def add_unknown_topic(response: Any, version: int) -> None:
        assignment = response.assignment
        if assignment is not None and assignment.topic_partitions:
            stranger = copy.copy(assignment.topic_partitions[0])
            stranger.topic_id, stranger.partitions = uuid.uuid4(), list(partitions)
            assignment.topic_partitions = assignment.topic_partitions + [stranger]
    return add_unknown_topic
