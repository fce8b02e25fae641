"""Instructions per message of the two hot paths, counted by valgrind (callgrind), which a
loaded machine does not disturb the way it disturbs wall-clock and CPU-time figures.

    .venv/bin/python benchmarks/callgrind_hot_paths.py [--messages 100000] [--tree DIR]

For each path the same workload runs under callgrind twice, with N and with 2N messages,
and the difference of the two instruction totals divided by N is reported: start-up,
connecting and metadata cancel out, what is left is the cost of N more messages in the
whole process (the application thread and the client's I/O thread).

* produce: ``Producer.produce(topic, 100-byte value)`` to one partition (acks=1,
  linger.ms=5), then ``flush()``: encoding, batching, sending and the answers;
* consume: ``Consumer.consume(10000, 1.0)`` from offset 0 of a partition filled
  beforehand (manual assignment), every value touched: fetching, queueing, decoding.

``--tree DIR`` measures the ``kafka_client`` of another source tree (an unchanged copy
of the repository, say), so a change can be compared with what it replaces in one
session. The broker (Tansu) runs outside valgrind.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

WORKLOADS = {
    "produce": """
import sys; sys.path.insert(0, {tree!r})
from kafka_client import Producer
p = Producer({{"bootstrap.servers": {bootstrap!r}, "acks": 1, "linger.ms": 5}})
payload = b"x" * 100
produce = p.produce
for _ in range({n}):
    produce({topic!r}, payload, partition=0)
assert p.flush(600) == 0
p.close()
""",
    "consume": """
import sys; sys.path.insert(0, {tree!r})
from kafka_client import Consumer, TopicPartition
c = Consumer({{"bootstrap.servers": {bootstrap!r}, "enable.auto.commit": False}})
c.assign([TopicPartition({topic!r}, 0, 0)])
got = 0
while got < {n}:
    for m in c.consume(min(10000, {n} - got), 1.0):
        assert m.error() is None
        len(m.value())
        got += 1
c.close()
""",
}


def instructions(script: str) -> int:
    """Total instructions (Ir) of one run of ``script`` under callgrind."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                        sys.executable, "-c", script], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(out) as f:
            for line in f:
                m = re.match(r"(?:summary|totals):\s+(\d+)", line)
                if m:
                    return int(m.group(1))
    raise RuntimeError("no instruction total in the callgrind output")


def fill(bootstrap: str, topic: str, n: int) -> None:
    sys.path.insert(0, ROOT)
    from kafka_client import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    values = [b"x" * 100] * 10000
    for start in range(0, n, 10000):
        while True:
            try:
                p.produce_batch(topic, values[:min(10000, n - start)], partition=0)
                break
            except BufferError:
                p.poll(0.1)
    assert p.flush(120) == 0
    p.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--tree", default=ROOT, help="source tree whose kafka_client is measured")
    ap.add_argument("--paths", default="produce,consume")
    args = ap.parse_args()
    sys.path.insert(0, ROOT)
    from kafka_client._testing.brokers import make_broker

    n = args.messages
    tree = os.path.abspath(args.tree)
    with make_broker("tansu") as broker:
        broker.start()
        for path in args.paths.split(","):
            totals = []
            for count in (n, 2 * n):
                topic = f"callgrind-{path}-{uuid.uuid4().hex[:8]}"
                broker.create_topic(topic, partitions=1)
                if path == "consume":
                    fill(broker.bootstrap, topic, count)
                totals.append(instructions(WORKLOADS[path].format(
                    tree=tree, bootstrap=broker.bootstrap, topic=topic, n=count)))
            per = (totals[1] - totals[0]) / n
            print(f"{path}: {per:,.0f} instructions per message "
                  f"({totals[0]:,} for {n:,}, {totals[1]:,} for {2 * n:,}; tree {tree})")


if __name__ == "__main__":
    main()
