"""An exactly-once consume-transform-produce loop, run as a child process by
test_transactions.py (so that it can be killed in the middle of a transaction).

    python txn_loop.py BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID --ends E0,E1,..
                       [--batch N] [--abort-every K] [--pause-at T]

Reads INPUT from the group's committed offsets (manual assignment of every partition),
and for each batch of up to N messages: begin a transaction, produce b"out:" + value to
the same partition of OUTPUT, send the offsets to the transaction, and commit, except
every K-th transaction, which is flushed (its output written) and then aborted (the
consumer goes back to where the transaction started, so those messages are processed
again). With --pause-at T, the T-th transaction stops half-way, after its first half is
flushed (in the log, not committed), prints ``PAUSED`` and waits to be killed. Ends when
every input partition is consumed to its end offset (``--ends``: Tansu 0.6 answers
ListOffsets with the last batch's base offset + 1, so the test passes the true ends) and
prints ``DONE <json>`` (transactions committed and aborted, messages produced, the
offsets it started from).
"""
from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from kafka_client import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402


def main(argv):
    bootstrap, input_topic, output_topic, group, txn_id = argv[:5]
    opts = dict(zip(argv[5::2], argv[6::2]))
    batch = int(opts.get("--batch", 500))
    abort_every = int(opts.get("--abort-every", 7))
    pause_at = int(opts.get("--pause-at", 0))

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                         "linger.ms": 5})
    # First: fences an earlier instance and aborts what it left open, so the committed
    # offsets read next are final.
    producer.init_transactions(30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "auto.offset.reset": "earliest"})
    parts = sorted(consumer.list_topics(input_topic, 10).topics[input_topic].partitions)
    committed = consumer.committed([TopicPartition(input_topic, p) for p in parts], 10)
    next_offset = {tp.partition: max(tp.offset, 0) for tp in committed}
    high = dict(enumerate(int(e) for e in opts["--ends"].split(",")))
    consumer.assign([TopicPartition(input_topic, p, next_offset[p]) for p in parts])
    stats = {"committed": 0, "aborted": 0, "produced": 0, "start": dict(next_offset)}
    txn = 0
    while any(next_offset[p] < high[p] for p in parts):
        msgs = [m for m in consumer.consume(batch, 1.0) if m.error() is None]
        if not msgs:
            continue
        txn += 1
        started = dict(next_offset)
        producer.begin_transaction()
        for i, m in enumerate(msgs):
            producer.produce(output_topic, b"out:" + m.value(), key=m.value(),
                             partition=m.partition())
            next_offset[m.partition()] = m.offset() + 1
            stats["produced"] += 1
            if txn == pause_at and i == len(msgs) // 2:
                producer.flush(30)
                print("PAUSED", flush=True)
                time.sleep(3600)
        offsets = [TopicPartition(input_topic, p, o) for p, o in next_offset.items()]
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
        if abort_every and txn % abort_every == 0:
            # As if something failed once the output was written: it is in the log,
            # and the abort marks it so.
            producer.flush(30)
            producer.abort_transaction(30)
            stats["aborted"] += 1
            next_offset = started
            for p, o in started.items():
                consumer.seek(TopicPartition(input_topic, p, o))
        else:
            try:
                producer.commit_transaction(30)
            except KafkaException as exc:
                if not exc.args[0].txn_requires_abort():
                    raise
                producer.abort_transaction(30)
                stats["aborted"] += 1
                next_offset = started
                for p, o in started.items():
                    consumer.seek(TopicPartition(input_topic, p, o))
                continue
            stats["committed"] += 1
    consumer.close()
    producer.close(30)
    print("DONE " + json.dumps(stats), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
