"""The statistics document's shared parts (kafka_client._stats): librdkafka's rolling
windows, partition defaults and request names."""
from __future__ import annotations

import math
import statistics

import pytest

from kafka_client._stats import (
    CONSUMER_REQUESTS, PRODUCER_REQUESTS, RESERVOIR, StatsWindow, empty_window,
    partition_stats, request_counts,
)
from kafka_proto.messages import ApiKey

WINDOW_KEYS = ["min", "max", "avg", "sum", "stddev", "p50", "p75", "p90", "p95", "p99",
               "p99_99", "outofrange", "hdrsize", "cnt"]


def test_a_window_summarises_its_interval_then_starts_again():
    w = StatsWindow()
    values = [0.001 * i for i in range(1, 101)]      # 1..100 ms
    for v in values:
        w.add(v)
    out = w.roll(1e6)                                # microseconds, as librdkafka's rtt
    assert list(out) == WINDOW_KEYS
    assert (out["min"], out["max"], out["cnt"]) == (1000, 100000, 100)
    assert out["sum"] == pytest.approx(5_050_000, abs=1)
    assert out["avg"] == pytest.approx(50_500, abs=1)
    assert out["stddev"] == pytest.approx(statistics.pstdev(values) * 1e6, abs=2)
    assert (out["p50"], out["p90"], out["p99"], out["p99_99"]) == (50000, 90000, 99000,
                                                                   100000)
    assert w.roll(1e6) == empty_window()             # the next interval saw nothing
    assert list(empty_window()) == WINDOW_KEYS


def test_a_busy_window_keeps_a_bounded_uniform_sample_for_its_percentiles():
    w = StatsWindow()
    values = [float(i % 1000) for i in range(50 * RESERVOIR)]
    for v in values:
        w.add(v)
    assert len(w.samples) == RESERVOIR
    out = w.roll()
    assert out["cnt"] == len(values) and out["max"] == 999 and out["min"] == 0
    assert out["avg"] == int(statistics.fmean(values))       # exact: every value counts
    assert math.isclose(out["stddev"], statistics.pstdev(values), rel_tol=0.01)
    # percentiles from a uniform sample of about 0..999: loose bounds
    assert 400 <= out["p50"] <= 600 and out["p99"] >= 950


def test_a_window_of_a_client_without_statistics_keeps_no_samples():
    """statistics.interval.ms=0: no document is built, nothing rolls the windows; their
    samples (up to RESERVOIR floats each, per topic and per connection) were kept for
    nothing (~75 KB per topic a producer wrote to)."""
    w = StatsWindow(keep_samples=False)
    for i in range(3 * RESERVOIR):
        w.add(float(i))
    assert w.samples == [] and w.count == 3 * RESERVOIR
    out = w.roll()
    assert out["cnt"] == 3 * RESERVOIR and out["max"] == 3 * RESERVOIR - 1
    assert out["p99"] == 0 and w.keep is False


def test_partition_objects_have_librdkafkas_fields_and_defaults():
    p = partition_stats(partition=3, committed_offset=42, txmsgs=7)
    assert p["partition"] == 3 and p["txmsgs"] == 7
    assert p["committed_offset"] == p["commited_offset"] == 42   # librdkafka's spelling too
    assert p["stored_offset"] == p["lo_offset"] == -1001 and p["consumer_lag"] == -1
    assert list(partition_stats())[:3] == ["partition", "broker", "leader"]
    with pytest.raises(KeyError, match="lag"):
        partition_stats(lag=1)


def test_request_counts_name_every_api_librdkafka_lists():
    out = request_counts({ApiKey.PRODUCE: 3, ApiKey.API_VERSIONS: 1,
                          ApiKey.DESCRIBE_CONFIGS: 2}, PRODUCER_REQUESTS)
    assert list(out)[:len(PRODUCER_REQUESTS)] == list(PRODUCER_REQUESTS)
    assert out["Produce"] == 3 and out["ApiVersion"] == 1 and out["Metadata"] == 0
    assert out["DescribeConfigs"] == 2      # not in librdkafka's list: added by its name
    assert "Fetch" in CONSUMER_REQUESTS and "Produce" not in CONSUMER_REQUESTS
