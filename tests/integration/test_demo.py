"""The demo (``./dev demo``): end to end as a command, and in-process on both brokers."""
from __future__ import annotations

import io
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from kafka_client import demo

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.integration
def test_demo_command_starts_broker_produces_and_verifies():
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(
        [sys.executable, "-m", "kafka_client.demo", "--messages", "3000",
         "--compression", "zstd", "--batch-bytes", "50000"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "produced 3,000 messages" in out
    assert "consumed 3,000 messages" in out
    assert "verified 3,000/3,000 messages" in out
    assert re.search(r"produced .* [\d,]+ msg/s, [\d.,]+ MB/s", out)
    assert re.search(r"consumed .* [\d,]+ msg/s, [\d.,]+ MB/s", out)
    # progress lines, and the broker it started is gone afterwards
    assert "produce  100.0% 3,000/3,000" in out
    port = int(re.search(r"started tansu on 127\.0\.0\.1:(\d+)", out).group(1))
    assert "stopped tansu" in out
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_demo_against_running_broker(broker, codec):
    out = io.StringIO()
    ok = demo.run(broker.bootstrap, messages=2500, compression=codec, batch_bytes=40_000,
                  in_flight=3, out=out)
    text = out.getvalue()
    assert ok, text
    assert "verified 2,500/2,500 messages" in text
    # 2500 messages of 100 bytes in batches of at most 40,000 bytes: several requests
    assert "started" not in text  # used the given broker


def test_demo_detects_foreign_data(broker, topic_name):
    from kafka_client._net.blocking import BlockingConnection
    from kafka_client._testing import simple
    from kafka_proto.records import RecordBatchBuilder

    broker.create_topic(topic_name)
    with BlockingConnection(broker.host, broker.port) as c:
        b = RecordBatchBuilder()
        b.append(b"not a demo message")
        simple.produce(c, topic_name, 0, b.build())
    out = io.StringIO()
    ok = demo.run(broker.bootstrap, messages=100, topic=topic_name, out=out)
    assert not ok
    assert "FAILED: produce: base offset 1, expected 0" in out.getvalue()
    assert "verified" not in out.getvalue()


def test_demo_consume_check_catches_a_changed_message(broker, topic_name):
    from kafka_client._net.blocking import BlockingConnection
    from kafka_client._testing import simple
    from kafka_proto.records import RecordBatchBuilder

    broker.create_topic(topic_name)
    filler = demo._filler()
    with BlockingConnection(broker.host, broker.port) as c:
        b = RecordBatchBuilder()
        for i in range(50):
            b.append(demo._value(i, filler) if i != 37 else demo._value(36, filler))
        simple.produce(c, topic_name, 0, b.build())
        out = io.StringIO()
        ok = demo._consume(c, topic_name, 50, out, lambda t: out.write(t + "\n"))
        assert not ok
        assert "FAILED: 50 of 50 messages read, high watermark 50, 1 mismatched" in out.getvalue()
        out = io.StringIO()
        assert not demo._consume(c, topic_name, 60, out, lambda t: out.write(t + "\n"))
        assert "FAILED: 50 of 60" in out.getvalue()


def test_demo_cli_rejects_bad_arguments(capsys):
    with pytest.raises(SystemExit):
        demo.main(["--messages", "0"])
    with pytest.raises(SystemExit):
        demo.main(["--compression", "brotli"])
    with pytest.raises(SystemExit):
        demo.main(["--bootstrap", "nohostport", "--messages", "1"])


class FakeTty(io.StringIO):
    def isatty(self):
        return True


def test_progress_bar_on_a_terminal_redraws_one_line():
    out = FakeTty()
    bar = demo.Progress("produce", 200, out, width=10)
    bar.update(50, force=True)
    bar.update(60)  # within 0.1 s of the last draw: skipped
    bar.finish(200)
    text = out.getvalue()
    assert text.count("\r") == 2 and text.endswith("\n")
    assert "[##........]  25.0%         50/200" in text
    assert "[##########] 100.0%        200/200" in text


def test_progress_on_a_pipe_prints_quarters():
    out = io.StringIO()
    bar = demo.Progress("consume", 100, out)
    for done in range(0, 101, 5):
        bar.update(done)
    bar.finish(100)
    lines = out.getvalue().splitlines()
    assert [ln.split()[1] for ln in lines] == ["0.0%", "25.0%", "50.0%", "75.0%", "100.0%"]
