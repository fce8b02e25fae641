"""``python -m kafka_client.tools dump-log``: segment files and their indexes, decoded
through kafka_proto, on files written by a PartitionLog (no broker process)."""
from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from argparse import Namespace

from kafka_proto.logdir import segment_file_name
from kafka_proto.records import (
    Compression,
    RecordBatchBuilder,
    build_control_batch,
    read_batch_header,
    stamp_batch,
)

from kafka_client.testing._config import TopicSettings
from kafka_client.testing.storage import PartitionLog
from kafka_client.tools import dump_log

NOW = int(time.time() * 1000)


def write_log(directory):
    s = TopicSettings.defaults()
    s.index_interval_bytes = 100
    log = PartitionLog(directory, "t", 0, s)
    batches = []
    b = RecordBatchBuilder(compression=Compression.GZIP, producer_id=5, producer_epoch=2,
                           base_sequence=0, transactional=True)
    b.append(b"first", key=b"k1", timestamp=NOW, headers=[("h", b"1")])
    b.append(None, key=b"k2", timestamp=NOW + 1)
    batches.append(b.build())
    batches.append(build_control_batch(1, 5, 2, coordinator_epoch=7, timestamp=NOW + 2))
    for i in range(10):
        b = RecordBatchBuilder()
        b.append(b"value-%d" % i + bytes(50), key=None, timestamp=NOW + 10 + i)
        batches.append(b.build())
    for raw in batches:
        data = bytearray(raw)
        stamp_batch(data, 0, log.end_offset, 3)
        log.append(data, [read_batch_header(data)])
    log.roll()
    log.close()
    return os.path.join(directory, segment_file_name(0))


def run(path, records=False, crc=True):
    out = io.StringIO()
    status = dump_log.run(Namespace(file=path, records=records, no_crc_check=not crc), out)
    return status, out.getvalue()


def test_batches_and_records(tmp_path):
    path = write_log(str(tmp_path / "t-0"))
    status, text = run(path)
    assert status == 0
    lines = text.splitlines()
    assert lines[0] == f"Dumping {path}"
    batches = [line for line in lines if line.startswith("baseOffset:")]
    assert len(batches) == 12
    assert batches[0].startswith("baseOffset: 0 lastOffset: 1 count: 2 baseSequence: 0 "
                                 "lastSequence: 1 producerId: 5 producerEpoch: 2 "
                                 "partitionLeaderEpoch: 3 isTransactional: true "
                                 "isControl: false position: 0 ")
    assert "compresscodec: gzip" in batches[0] and "isvalid: true" in batches[0]
    assert "baseOffset: 2 lastOffset: 2 count: 1" in batches[1]
    assert "isControl: true" in batches[1]
    assert not any(line.startswith("|") for line in lines)
    status, text = run(path, records=True)
    assert status == 0
    records = [line for line in text.splitlines() if line.startswith("| offset:")]
    assert len(records) == 13
    assert records[0] == (f"| offset: 0 CreateTime: {NOW} keySize: 2 valueSize: 5 sequence: 0 "
                          "headerKeys: [h] key: k1 payload: first")
    assert "valueSize: -1" in records[1] and "payload: null" in records[1]
    assert "endTxnMarker: COMMIT coordinatorEpoch: 7" in records[2]


def test_index_files(tmp_path):
    path = write_log(str(tmp_path / "t-0"))
    status, text = run(path[:-4] + ".index")
    assert status == 0
    entries = [line for line in text.splitlines() if line.startswith("offset:")]
    assert entries and all(int(e.split()[3]) > 0 for e in entries)   # positions
    status, text = run(path[:-4] + ".timeindex")
    entries = [line for line in text.splitlines() if line.startswith("timestamp:")]
    assert status == 0 and entries
    stamps = [int(e.split()[1]) for e in entries]
    assert stamps == sorted(stamps) and stamps[-1] == NOW + 19


def test_corrupt_and_truncated_segments(tmp_path):
    path = write_log(str(tmp_path / "t-0"))
    with open(path, "rb") as f:
        data = bytearray(f.read())
    bad = str(tmp_path / "00000000000000000000.log")
    data[100] ^= 0xFF                          # inside the second batch
    with open(bad, "wb") as f:
        f.write(data)
    status, text = run(bad)
    assert status == 1 and "isvalid: false" in text and "CRC mismatch at position" in text
    status, text = run(bad, crc=False)
    assert status == 0 and text.count("baseOffset:") == 12
    with open(bad, "wb") as f:
        f.write(data[:-20])                    # the last batch cut short
    status, text = run(bad, crc=False)
    assert status == 1 and "undecodable batch" in text


def test_command_line(tmp_path):
    path = write_log(str(tmp_path / "t-0"))
    out = subprocess.run([sys.executable, "-m", "kafka_client.tools", "dump-log", path,
                          "--records"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.count("| offset:") == 13
    missing = subprocess.run([sys.executable, "-m", "kafka_client.tools", "dump-log",
                              str(tmp_path / "nope.log")], capture_output=True, text=True,
                             timeout=60)
    assert missing.returncode == 2 and "no such file" in missing.stderr
