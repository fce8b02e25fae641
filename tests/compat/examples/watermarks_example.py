#!/usr/bin/env python
"""Prints, for every partition of a topic, the group's committed offset, the low and
high watermarks and the lag, the way confluent-kafka's published offsets example does
(written here in its documented shape, for the drop-in tests).

    watermarks_example.py BOOTSTRAP GROUP TOPIC
"""
import sys

from confluent_kafka import OFFSET_INVALID, Consumer, KafkaException, TopicPartition

if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.stderr.write("Usage: %s <bootstrap-brokers> <group> <topic>\n" % sys.argv[0])
        sys.exit(1)
    broker, group, topic = sys.argv[1:]
    consumer = Consumer({"bootstrap.servers": broker, "group.id": group,
                         "enable.auto.commit": False})
    metadata = consumer.list_topics(topic, timeout=10)
    if metadata.topics[topic].error is not None:
        raise KafkaException(metadata.topics[topic].error)
    partitions = [TopicPartition(topic, p) for p in metadata.topics[topic].partitions]
    committed = consumer.committed(partitions, timeout=10)
    print("%-40s %9s %9s %9s %9s %9s" % ("topic", "partition", "committed", "low", "high",
                                        "lag"))
    for partition in committed:
        (lo, hi) = consumer.get_watermark_offsets(partition, timeout=10, cached=False)
        if partition.offset == OFFSET_INVALID:
            offset = "-"
            lag = hi - lo if hi >= 0 else "-"
        else:
            offset = "%d" % partition.offset
            lag = hi - partition.offset if hi >= 0 else "-"
        print("%-40s %9s %9s %9d %9d %9s" % (partition.topic, partition.partition, offset,
                                            lo, hi, lag))
    consumer.close()
