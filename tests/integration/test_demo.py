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
    assert "(produce_batch; batches of" in out
    assert "delivery reports: 3,000 of 3,000, 3,000 delivered, 0 failed" in out
    assert "consumed 3,000 messages" in out
    assert "verified 3,000/3,000 messages: offsets 0..2999 and contents match" in out
    assert re.search(r"produced .* [\d,]+ msg/s, [\d.,]+ MB/s", out)
    assert re.search(r"consumed .* [\d,]+ msg/s, [\d.,]+ MB/s", out)
    # progress lines, and the broker it started is gone afterwards
    assert "produce  100.0% 3,000/3,000" in out
    assert "consume  100.0% 3,000/3,000" in out
    port = int(re.search(r"started tansu on 127\.0\.0\.1:(\d+)", out).group(1))
    assert "stopped tansu" in out
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


@pytest.mark.parametrize("api,codec,acks,idempotence", [
    ("batch", "none", "all", False), ("batch", "lz4", "1", False),
    ("produce", "none", "all", True), ("produce", "gzip", "0", False)])
def test_demo_against_running_broker(broker, api, codec, acks, idempotence):
    out = io.StringIO()
    ok = demo.run(broker.bootstrap, messages=2500, compression=codec, api=api, acks=acks,
                  idempotence=idempotence, batch_bytes=40_000, out=out)
    text = out.getvalue()
    assert ok, text
    assert "started" not in text  # used the given broker
    assert "delivery reports: 2,500 of 2,500, 2,500 delivered, 0 failed" in text
    assert "verified 2,500/2,500 messages: offsets 0..2499" in text
    # batch.size 40,000 bounds the batches: 2,500 messages of ~110 bytes need several
    m = re.search(r"\((produce_batch|produce); batches of ([\d,]+) messages, ([\d,]+) kB", text)
    assert m, text
    assert m.group(1) == ("produce_batch" if api == "batch" else "produce")
    assert int(m.group(2).replace(",", "")) <= 400
    assert int(m.group(3).replace(",", "")) <= 40


def test_demo_on_a_topic_with_earlier_data_starts_at_its_end(broker, topic_name):
    from kafka_client._testing.blocking import BlockingConnection
    from kafka_client._testing import simple
    from kafka_proto.records import RecordBatchBuilder

    broker.create_topic(topic_name)
    with BlockingConnection(broker.host, broker.port) as c:
        b = RecordBatchBuilder()
        b.append(b"not a demo message")
        simple.produce(c, topic_name, 0, b.build())
    for api in ("batch", "produce"):
        out = io.StringIO()
        ok = demo.run(broker.bootstrap, messages=100, api=api, topic=topic_name, out=out)
        text = out.getvalue()
        assert ok, text
        base = 1 if api == "batch" else 101
        assert f"1 partition holding {base} earlier message" in text
        assert f"verified 100/100 messages: offsets {base}..{base + 99}" in text


def test_demo_refuses_bad_producer_settings_before_starting_a_broker():
    from kafka_client import KafkaException

    out = io.StringIO()
    with pytest.raises(KafkaException) as ei:
        demo.run(None, messages=10, acks="1", idempotence=True, out=out)
    assert "acks" in str(ei.value)
    assert out.getvalue() == ""  # no broker was started


def test_demo_consume_check_catches_a_changed_message(broker, topic_name):
    from kafka_client._testing.blocking import BlockingConnection
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
    ok = demo._consume(broker.bootstrap, topic_name, 50, out, lambda t: out.write(t + "\n"),
                       timeout=10)
    assert not ok
    assert "FAILED: 50 of 50 messages read, end of partition at 50, 1 mismatched (first: " \
        "#37 at offset 37)" in out.getvalue()
    out = io.StringIO()
    assert not demo._consume(broker.bootstrap, topic_name, 60, out,
                             lambda t: out.write(t + "\n"), timeout=3)
    assert "FAILED: 50 of 60" in out.getvalue()


def test_demo_cli_rejects_bad_arguments(capsys):
    with pytest.raises(SystemExit):
        demo.main(["--messages", "0"])
    with pytest.raises(SystemExit):
        demo.main(["--compression", "brotli"])
    with pytest.raises(SystemExit):
        demo.main(["--api", "fast"])
    with pytest.raises(SystemExit):
        demo.main(["--bootstrap", "nohostport", "--messages", "1"])
    assert demo.main(["--acks", "0", "--idempotence", "--messages", "1"]) == 2
    assert "enable.idempotence" in capsys.readouterr().err


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
