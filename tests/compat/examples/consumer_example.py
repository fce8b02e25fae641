#!/usr/bin/env python
"""Subscribes to topics and prints what it consumes, the way confluent-kafka's published
consumer example does (written here in its documented shape, for the drop-in tests).
It stops after COUNT messages instead of running until Ctrl-C.

    consumer_example.py BOOTSTRAP GROUP COUNT TOPIC...
"""
import sys

from confluent_kafka import Consumer, KafkaException

if __name__ == "__main__":
    if len(sys.argv) < 5:
        sys.stderr.write("Usage: %s <bootstrap-brokers> <group> <count> <topic1> ...\n"
                         % sys.argv[0])
        sys.exit(1)
    broker, group, count, topics = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
    conf = {"bootstrap.servers": broker, "group.id": group, "session.timeout.ms": 6000,
            "auto.offset.reset": "earliest", "enable.auto.offset.store": False}

    c = Consumer(conf)

    def print_assignment(consumer, partitions):
        print("Assignment:", [(p.topic, p.partition) for p in partitions], flush=True)

    c.subscribe(topics, on_assign=print_assignment)
    seen = 0
    try:
        while seen < count:
            msg = c.poll(timeout=1.0)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            sys.stderr.write("%% %s [%d] at offset %d with key %s:\n"
                             % (msg.topic(), msg.partition(), msg.offset(), str(msg.key())))
            print(msg.value().decode(), flush=True)
            c.store_offsets(msg)
            seen += 1
    except KeyboardInterrupt:
        sys.stderr.write("%% Aborted by user\n")
    finally:
        c.close()
