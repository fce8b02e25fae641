"""confluent-kafka drop-in: programs written the way confluent-kafka's published examples
are (producing from stdin, consuming a subscription, printing watermarks and lag, the
context-manager style; kept in tests/compat/examples/) run unchanged once
``confluent_kafka`` is replaced by ``kafka_client`` in their source, and print what they
print on confluent-kafka itself."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("confluent_kafka")

EXAMPLES = Path(__file__).parent / "examples"
ROOT = str(Path(__file__).resolve().parents[2])


def run(name, args, client, tmp_path, stdin="", timeout=120):
    """Run example ``name`` with ``client`` ("confluent_kafka" as published, or
    "kafka_client": the import swap, nothing else changed)."""
    source = (EXAMPLES / name).read_text()
    if client == "kafka_client":
        source, swaps = re.subn(r"^(from|import) confluent_kafka\b", r"\1 kafka_client",
                                source, flags=re.M)
        assert swaps >= 1 and not re.search(r"^(from|import) confluent", source, re.M)
    script = tmp_path / f"{client}-{name}"
    script.write_text(source)
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, str(script), *args], input=stdin, text=True,
                         capture_output=True, timeout=timeout, env=env, cwd=str(tmp_path))
    assert out.returncode == 0, f"{client} {name}:\n{out.stdout}\n{out.stderr}"
    return out


def lines_matching(text, pattern):
    return [line for line in text.splitlines() if re.match(pattern, line)]


@pytest.mark.parametrize("client", ["confluent_kafka", "kafka_client"])
def test_produce_consume_and_watermarks_examples(client, noida_broker, topic_name, tmp_path):
    # noida-db: Tansu 0.6 answers ListOffsets(latest) with the last batch's base offset
    # + 1, so the high watermark would be wrong for both clients there
    topic = f"{topic_name}-{client}"
    noida_broker.create_topic(topic, partitions=2)
    bootstrap = noida_broker.bootstrap
    lines = [f"line {i}" for i in range(20)]

    produced = run("producer_example.py", [bootstrap, topic], client, tmp_path,
                   stdin="\n".join(lines) + "\n")
    delivered = lines_matching(produced.stderr, rf"% Message delivered to {topic} \[[01]\] @ ")
    assert len(delivered) == 20, produced.stderr
    assert "% Waiting for" in produced.stderr

    group = f"{topic}-group"
    consumed = run("consumer_example.py", [bootstrap, group, "20", topic], client, tmp_path)
    assert sorted(consumed.stdout.splitlines()[1:]) == sorted(lines), consumed.stdout
    assert consumed.stdout.startswith("Assignment: [")

    marks = run("watermarks_example.py", [bootstrap, group, topic], client, tmp_path)
    rows = [line.split() for line in marks.stdout.splitlines()[1:]]
    assert sorted(r[1] for r in rows) == ["0", "1"]
    for _topic, _partition, committed, low, high, lag in rows:
        # the consumer stored every message and committed them on close (a partition
        # the sticky partitioner left empty has no commit)
        assert committed == high or (high == "0" and committed == "-"), marks.stdout
        assert low == "0" and lag == "0", marks.stdout
    assert sum(int(r[4]) for r in rows) == 20


@pytest.mark.parametrize("client", ["confluent_kafka", "kafka_client"])
def test_context_manager_example(client, tansu_broker, topic_name, tmp_path):
    topic = f"{topic_name}-{client}"
    tansu_broker.create_topic(topic, partitions=1)
    out = run("context_manager_example.py", [tansu_broker.bootstrap, topic, "50"], client,
              tmp_path)
    assert out.stdout.splitlines() == [
        "delivered 50 of 50",
        "after the with block: Producer has been closed",
        "read 50 first message 0 last message 49",
        "after the with block: Consumer closed",
    ], out.stdout + out.stderr
