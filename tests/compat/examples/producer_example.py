#!/usr/bin/env python
"""Reads lines from stdin and produces each one to a topic, the way confluent-kafka's
published producer example does (written here in its documented shape, for the drop-in
tests: they run it with ``confluent_kafka`` swapped for ``kafka_client``).

    producer_example.py BOOTSTRAP TOPIC < lines
"""
import sys

from confluent_kafka import Producer

if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.stderr.write("Usage: %s <bootstrap-brokers> <topic>\n" % sys.argv[0])
        sys.exit(1)
    broker, topic = sys.argv[1], sys.argv[2]

    p = Producer({"bootstrap.servers": broker})

    def delivery_callback(err, msg):
        if err:
            sys.stderr.write("%% Message failed delivery: %s\n" % err)
        else:
            sys.stderr.write("%% Message delivered to %s [%d] @ %d\n"
                             % (msg.topic(), msg.partition(), msg.offset()))

    for line in sys.stdin:
        try:
            p.produce(topic, line.rstrip(), callback=delivery_callback)
        except BufferError:
            sys.stderr.write("%% Local producer queue is full (%d messages awaiting "
                             "delivery): try again\n" % len(p))
        p.poll(0)

    sys.stderr.write("%% Waiting for %d deliveries\n" % len(p))
    p.flush()
