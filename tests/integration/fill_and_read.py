"""Writing numbered messages and counting what a consumer reads back, for the tests that
put a broker's answers through the fault proxy (test_hostile_answers.py,
test_retry_backoff.py)."""
from __future__ import annotations

import time
from collections import Counter

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
