"""The command lines of docs/testing.md run as written: ``python -m kafka_client.testing
...`` starts the cluster the page describes, and ``python -m kafka_client.tools dump-log
FILE --records`` prints one of its segments."""
from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from cli_cluster import start_cli_cluster  # tests/testing/cli_cluster.py
from kafka_client import Producer
from kafka_client.testing import Cluster

ROOT = Path(__file__).resolve().parents[2]
DOC = "docs/testing.md"


def doc_command(doc: str, start: str) -> list:
    """The command line of ``doc`` that starts with ``start`` (in an indented block, or in
    backticks), continuation lines joined, as an argument list."""
    text = (ROOT / doc).read_text(encoding="utf-8").replace("\\\n", " ")
    found = re.search(r"(?m)^ {4}(" + re.escape(start) + r"[^\n]*)", text) or re.search(
        r"`(" + re.escape(start) + r"[^`]*)`", text)
    assert found, f"{doc} has no command line starting {start!r}"
    return shlex.split(found.group(1))


def test_the_guide_command_lines(tmp_path):
    """The cluster command (its control port left to the system: 19000 may be taken)
    makes the topic it names with its broker setting, ``Cluster.attach`` drives it, and
    dump-log prints what was produced to it."""
    args = doc_command(DOC, "python -m kafka_client.testing")
    assert args[:3] == ["python", "-m", "kafka_client.testing"]
    args[args.index("--control-port") + 1] = "0"
    proc, printed = start_cli_cluster(args[3:] + ["--data-dir", str(tmp_path / "data")],
                                      cwd=ROOT)
    try:
        attached = Cluster.attach(printed["control"])
        try:
            topic = attached.describe_topic("orders")
            assert len(topic.partitions) == 6
            assert all(len(p.replicas) == 3 for p in topic.partitions)
            assert topic.config["min.insync.replicas"] == 2
            with Producer({"bootstrap.servers": printed["bootstrap.servers"]}) as producer:
                producer.produce("orders", b"dumped", partition=0)
            attached.wait_in_sync("orders")
            segment = attached.segment_files("orders", 0, attached.leader("orders", 0))[0]
        finally:
            attached.stop()   # detaches only
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    args = doc_command(DOC, "python -m kafka_client.tools dump-log")
    assert args[:5] == ["python", "-m", "kafka_client.tools", "dump-log", "FILE"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    dump = subprocess.run([sys.executable, "-m", "kafka_client.tools", "dump-log", segment,
                           "--records"], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=60)
    assert dump.returncode == 0, dump.stderr
    assert "dumped" in dump.stdout
