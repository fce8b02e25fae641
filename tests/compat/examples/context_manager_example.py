#!/usr/bin/env python
"""Produces COUNT messages and reads them back with both clients used as context
managers, in the style of confluent-kafka's context-manager example (written here in its
documented shape, for the drop-in tests): leaving each ``with`` block flushes or closes
the client, and using it afterwards is a RuntimeError.

    context_manager_example.py BOOTSTRAP TOPIC COUNT
"""
import sys

from confluent_kafka import Consumer, Producer, TopicPartition

if __name__ == "__main__":
    broker, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    delivered = []

    with Producer({"bootstrap.servers": broker, "linger.ms": 10}) as producer:
        for i in range(count):
            producer.produce(topic, key=str(i), value="message %d" % i, partition=0,
                             on_delivery=lambda err, msg: delivered.append(err is None))
            producer.poll(0)
        producer.flush(30)
    print("delivered", sum(delivered), "of", count)
    try:
        producer.produce(topic, value="too late")
    except RuntimeError as e:
        print("after the with block:", e)

    values = []
    with Consumer({"bootstrap.servers": broker, "group.id": topic + "-reader",
                   "enable.auto.commit": False}) as consumer:
        consumer.assign([TopicPartition(topic, 0, 0)])
        while len(values) < count:
            for msg in consumer.consume(num_messages=count, timeout=1.0):
                if msg.error() is None:
                    values.append(msg.value().decode())
    print("read", len(values), "first", values[0], "last", values[-1])
    try:
        consumer.poll(0)
    except RuntimeError as e:
        print("after the with block:", e)
