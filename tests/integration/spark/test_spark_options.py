"""The data source's option parsing, range splitting and rate limit, without Spark running
or a broker (the integration modules beside this one check them end to end)."""
from __future__ import annotations

import random

import pytest

pytest.importorskip("pyspark")

from kafka_client.spark.offsets import OffsetRange, check_range, split_ranges  # noqa: E402
from kafka_client.spark.options import (KafkaOptionError, OffsetSpec,  # noqa: E402
                                        TimestampSpec, parse_read_options,
                                        parse_write_options)
from kafka_client.spark.stream import KafkaStreamReader, rate_limit  # noqa: E402

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def parse(streaming=False, **options):
    return parse_read_options(dict(BOOT, **options), streaming)


def test_defaults_and_client_properties():
    opts = parse(subscribe="a, b", **{"kafka.fetch.max.bytes": "1000",
                                      "Kafka.Client.Id": "x"})
    assert opts.subscribe == ("a", "b")
    assert opts.starting == OffsetSpec("earliest") and opts.ending == OffsetSpec("latest")
    assert opts.client == {"bootstrap.servers": "127.0.0.1:9092", "fetch.max.bytes": "1000",
                           "client.id": "x"}
    conf = opts.consumer_config()
    assert conf["isolation.level"] == "read_uncommitted"
    assert conf["enable.auto.commit"] is False
    assert parse(True, subscribe="a").starting == OffsetSpec("latest")


@pytest.mark.parametrize("options,message", [
    ({"subscribe": "a", "kafka.bootstrap.servers": " "},
     "option 'kafka.bootstrap.servers' is required"),
    ({}, "one of the options 'subscribe', 'subscribePattern' or 'assign' is required"),
    ({"subscribe": "a", "subscribePattern": "a.*"},
     "only one of 'subscribe', 'subscribePattern' and 'assign' can be given; got subscribe "
     "and subscribePattern"),
    ({"subscribe": " , "}, "option 'subscribe' names no topic"),
    ({"subscribePattern": "(a"}, "option 'subscribePattern': bad regular expression"),
    ({"assign": '{"a": [0, -1]}'}, "option 'assign': topic 'a' must map to a list"),
    ({"assign": "[0]"}, "option 'assign' must be a non-empty JSON object"),
    ({"subscribe": "a", "startingOffsets": "{"}, "option 'startingoffsets': malformed JSON"),
    ({"subscribe": "a", "startingOffsets": '{"a": {"0": "5"}}'},
     "a [0] has offset \"5\", which is not an integer"),
    ({"subscribe": "a", "startingOffsets": '{"a": {"0": -1}}'},
     "offsets must be >= 0, or -2 (earliest)"),
    ({"subscribe": "a", "endingOffsets": '{"a": {"0": -2}}'},
     "offsets must be >= 0, or -1 (latest)"),
    ({"subscribe": "a", "endingOffsets": "earliest"},
     "option 'endingoffsets' cannot be 'earliest' here"),
    ({"subscribe": "a", "startingTimestamp": "soon"},
     "option 'startingtimestamp' must be an integer, not 'soon'"),
    ({"subscribe": "a", "minPartitions": "0"}, "option 'minpartitions' must be at least 1"),
    ({"subscribe": "a", "includeHeaders": "yes"},
     "option 'includeheaders' must be true or false, not 'yes'"),
    ({"subscribe": "a", "maxTriggerDelay": "5q"},
     "option 'maxtriggerdelay' must be a duration such as '30s'"),
    ({"subscribe": "a", "minOffsetsPerTrigger": "11", "maxOffsetsPerTrigger": "10"},
     "'minOffsetsPerTrigger' (11) is higher than 'maxOffsetsPerTrigger' (10)"),
    ({"subscribe": "a", "kafka.auto.offset.reset": "earliest"},
     "option 'kafka.auto.offset.reset' is not supported: use startingOffsets"),
    ({"subscribe": "a", "startingOffsetsByTimestampStrategy": "first"},
     "must be 'error' or 'latest'"),
    ({"subscribe": "a", "endingOffset": "latest"}, "unknown option 'endingoffset'"),
])
def test_bad_read_options(options, message):
    with pytest.raises(KafkaOptionError) as info:
        parse_read_options(dict(BOOT, **options) if "kafka.bootstrap.servers" not in options
                           else options, False)
    assert message in str(info.value)


def test_streaming_only_and_batch_only_options():
    with pytest.raises(KafkaOptionError, match="ending offsets or timestamps are for batch"):
        parse(True, subscribe="a", endingTimestamp="5")
    opts = parse(True, subscribe="a", startingOffsets='{"a": {"0": -1, "1": 7}}',
                 maxOffsetsPerTrigger="500")
    assert opts.starting == OffsetSpec("json", {"a": {0: -1, 1: 7}})
    assert opts.max_offsets_per_trigger == 500


def test_trigger_options_are_ignored_by_batch_queries(caplog):
    """As Spark's source: a batch query ignores them with a warning (they were an error,
    so a query sharing its options with a streaming one failed)."""
    opts = parse(subscribe="a", maxOffsetsPerTrigger="10", minOffsetsPerTrigger="5",
                 maxTriggerDelay="1m")
    assert opts.max_offsets_per_trigger is None and opts.min_offsets_per_trigger is None
    assert "option 'maxOffsetsPerTrigger' is ignored in batch queries" in caplog.text
    assert "option 'maxTriggerDelay' is ignored in batch queries" in caplog.text
    opts = parse(True, subscribe="a", minOffsetsPerTrigger="5", maxTriggerDelay="90s")
    assert (opts.min_offsets_per_trigger, opts.max_trigger_delay_ms) == (5, 90_000)
    assert parse(True, subscribe="a", maxTriggerDelay="250").max_trigger_delay_ms == 250
    assert parse(True, subscribe="a").max_trigger_delay_ms == 15 * 60 * 1000


def test_min_offsets_per_trigger_waits_for_rows_or_the_delay(monkeypatch):
    """Spark's rule: the first micro-batch never waits; later ones wait while fewer than
    minOffsetsPerTrigger offsets are available, until maxTriggerDelay has passed since
    the last micro-batch."""
    now = [1_000_000.0]
    monkeypatch.setattr("kafka_client.spark.stream.time.time", lambda: now[0])
    reader = KafkaStreamReader(parse(True, subscribe="t", minOffsetsPerTrigger="10",
                                     maxTriggerDelay="30s"), None)
    froms = {("t", 0): 0, ("t", 1): 0}
    assert not reader._hold_back(froms, {("t", 0): 1, ("t", 1): 0})     # the first
    now[0] += 5
    assert reader._hold_back(froms, {("t", 0): 4, ("t", 1): 5})         # 9 waiting
    assert not reader._hold_back(froms, {("t", 0): 4, ("t", 1): 6})     # 10 waiting
    now[0] += 29
    assert reader._hold_back(froms, {("t", 0): 1, ("t", 1): 0})
    now[0] += 1
    assert not reader._hold_back(froms, {("t", 0): 1, ("t", 1): 0})     # 30 s passed


def test_timestamps_take_precedence():
    opts = parse(subscribe="a", startingOffsets="earliest", startingTimestamp="1000",
                 endingOffsetsByTimestamp='{"a": {"0": 2000}}')
    assert opts.starting == TimestampSpec(everywhere=1000)
    assert opts.ending == TimestampSpec(per_partition={"a": {0: 2000}})


def test_write_options():
    assert parse_write_options(dict(BOOT, topic=" t ")).topic == "t"
    assert parse_write_options(BOOT).producer_config()["enable.idempotence"] is True
    assert parse_write_options(dict(BOOT, **{"kafka.enable.idempotence": "false"})) \
        .producer_config()["enable.idempotence"] == "false"
    with pytest.raises(KafkaOptionError, match="unknown option 'subscribe'"):
        parse_write_options(dict(BOOT, subscribe="x"))
    with pytest.raises(KafkaOptionError, match="kafka.bootstrap.servers' is required"):
        parse_write_options({"topic": "t"})
    with pytest.raises(KafkaOptionError, match="'kafka.transactional.id' is not supported: "
                                               "the writer does not use transactions"):
        parse_write_options(dict(BOOT, **{"kafka.transactional.id": "t1"}))


def test_a_misspelt_client_property_fails_when_the_query_is_defined():
    """Not in a task on an executor once the job runs: the option names the property and
    what it probably meant."""
    for parse in (lambda o: parse_read_options(dict(o, subscribe="t"), streaming=False),
                  parse_write_options):
        with pytest.raises(KafkaOptionError) as info:
            parse(dict(BOOT, **{"kafka.fetch.wait.max.msec": "100"}))
        assert "option 'kafka.fetch.wait.max.msec'" in str(info.value)
        assert 'did you mean "fetch.wait.max.ms"' in str(info.value)


def test_split_ranges_cover_each_offset_once():
    rng = random.Random(7)
    for _ in range(200):
        ranges = [OffsetRange("t", p, start, start + rng.choice([0, 1, 5, 1000, 99_999]))
                  for p, start in enumerate(rng.randrange(0, 10**6) for _ in range(5))]
        wanted = rng.randrange(1, 40)
        parts = split_ranges(ranges, wanted)
        nonempty = [r for r in ranges if r.size]
        assert len(parts) >= min(wanted, sum(r.size for r in nonempty))
        for r in nonempty:
            mine = [p for p in parts if p.partition == r.partition]
            assert mine[0].start == r.start and mine[-1].end == r.end
            assert all(a.end == b.start for a, b in zip(mine, mine[1:]))
            assert all(p.size > 0 for p in mine)
    # As Spark: 10 tasks over 4 equal partitions give round(2.5) = 3 each.
    assert len(split_ranges([OffsetRange("t", p, 0, 100) for p in range(4)], 10)) == 12
    assert split_ranges([OffsetRange("t", 0, 5, 5)], None) == []


def test_check_range():
    key = ("t", 0)
    assert check_range(key, 10, 20, 0, 30, True) == (10, 20)
    assert check_range(key, 3, 20, 5, 30, False) == (5, 20)
    with pytest.raises(Exception, match=r"offsets 3..4 are no longer in the log"):
        check_range(key, 3, 20, 5, 30, True)
    with pytest.raises(KafkaOptionError, match="past the end of the log"):
        check_range(key, 0, 31, 0, 30, False)
    assert check_range(key, 25, 20, 0, 30, False) is None
    with pytest.raises(Exception, match="is after the ending offset 20"):
        check_range(key, 25, 20, 0, 30, True)


def test_rate_limit_shares_by_lag():
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 50}
    end = {("t", 0): 900, ("t", 1): 200, ("t", 2): 50}
    assert rate_limit(start, end, 10_000) == end
    got = rate_limit(start, end, 100)
    assert got == {("t", 0): 90, ("t", 1): 110, ("t", 2): 50}
    # a partition with little waiting still moves
    got = rate_limit({("t", 0): 0, ("t", 1): 0}, {("t", 0): 10_000, ("t", 1): 1}, 100)
    assert got == {("t", 0): 99, ("t", 1): 1}
