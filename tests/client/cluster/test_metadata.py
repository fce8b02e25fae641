"""The metadata cache's rules: additive brokers, max age, coalesced and fast refresh."""
from __future__ import annotations

import time

from kafka_client._cluster.metadata import ClusterMetadata, MetadataCache
from kafka_proto.messages import MetadataResponse

R = MetadataResponse


def response(brokers, topics):
    """brokers: {id: port}; topics: {name: (error, [leader per partition])}"""
    return R(brokers=[R.MetadataResponseBroker(node_id=i, host="h", port=p)
                      for i, p in brokers.items()],
             cluster_id="c", controller_id=min(brokers) if brokers else -1,
             topics=[R.MetadataResponseTopic(
                 name=name, error_code=err,
                 partitions=[R.MetadataResponsePartition(partition_index=i, leader_id=leader,
                                                         replica_nodes=[leader],
                                                         isr_nodes=[leader])
                             for i, leader in enumerate(leaders)])
                 for name, (err, leaders) in topics.items()])


def test_brokers_are_cached_additively():
    md = MetadataCache()
    md.update(response({1: 9001, 2: 9002}, {}), 0.0, None)
    md.update(response({2: 9102}, {}), 1.0, None)
    assert md.brokers == {1: ("h", 9001, None), 2: ("h", 9102, None)}
    assert md.cluster_id == "c"


def test_wanted_topics_are_asked_once_and_coalesced():
    md = MetadataCache(refresh_interval=-1)
    md.want(["a"])
    md.want(["b", "a"])
    assert md.due(0.0) == 0.0
    assert md.take_request_topics() == ["a", "b"]
    # While a request is in flight, further asks wait for the next one.
    md.request(["c"])
    md.request(["d"])
    assert md.due(0.1) is None
    changed = md.update(response({1: 1}, {"a": (0, [1, 1]), "b": (0, [1])}), 0.2, ["a", "b"])
    assert changed == {"a", "b"}
    assert md.due(0.3) == 0.0
    assert md.take_request_topics() == ["c", "d"]
    md.update(response({1: 1}, {}), 0.4, ["c", "d"])
    assert md.due(0.5) is None  # nothing asked, no periodic refresh


def test_topics_older_than_max_age_are_asked_again():
    md = MetadataCache(max_age=10.0, refresh_interval=-1)
    md.want(["a"])
    md.take_request_topics()
    md.update(response({1: 1}, {"a": (0, [1])}), 100.0, ["a"])
    assert md.due(105.0) is None
    assert md.due(110.0) == 0.0
    assert md.take_request_topics() == ["a"]


def test_missing_leaders_and_errors_trigger_a_fast_refresh_with_growing_interval():
    md = MetadataCache(refresh_interval=-1, fast_interval=0.1, fast_max=0.4)
    md.want(["a"])
    md.take_request_topics(9.9)
    md.update(response({1: 1}, {"a": (0, [1, -1])}), 10.0, ["a"])   # partition 1 leaderless
    assert md.due(10.05) == 10.1
    assert md.due(10.1) == 0.0
    md.take_request_topics(10.1)
    md.update(response({1: 1}, {"a": (5, [])}), 10.2, ["a"])         # LEADER_NOT_AVAILABLE
    assert md.due(10.25) == 10.2 + 0.2                                 # doubled
    md.take_request_topics(10.4)
    md.update(response({1: 1}, {"a": (0, [1, 1])}), 10.5, ["a"])
    assert md.due(10.6) is None
    assert md.leader("a", 1) == 1 and md.leader("a", 7) == -1 and md.leader("zz", 0) == -1
    # A produce error marks the topic stale: asked again soon.
    md.mark_stale("a", now=10.45)
    assert md.due(10.46) == 10.5       # at most one fast request per fast interval
    assert md.due(10.5) == 0.0


def test_a_leader_that_is_no_broker_backs_the_fast_refresh_off_like_a_missing_one():
    """A partition whose leader is no broker any answer named (99) or a negative id
    other than -1 (-5) is as leaderless as -1: the fast refresh backs off, doubling up
    to retry.backoff.max.ms (it stayed at the fast interval: the producer asked ten
    times a second for as long as it lasted; librdkafka, KIP-580, 10 times in 8 s)."""
    for bad in (99, -5):
        md = MetadataCache(refresh_interval=-1, fast_interval=0.1, fast_max=0.4)
        md.want(["a"])
        now, waits = 10.0, []
        for _ in range(4):
            md.take_request_topics(now)
            md.update(response({1: 1}, {"a": (0, [1, bad])}), now, ["a"])
            md.request(["a"], fast=True, now=now)      # the sender, for the leaderless
            due = md.due(now)
            waits.append(round(due - now, 3))
            now = due
        assert waits == [0.1, 0.2, 0.4, 0.4], (bad, waits)
        assert md.leader("a", 1) == bad   # the cache says what was answered


def test_failed_request_is_retried_after_the_fast_interval():
    md = MetadataCache(refresh_interval=-1, fast_interval=0.1)
    md.want(["a"])
    topics = md.take_request_topics()
    md.failed(topics, 5.0)
    assert md.due(5.01) == 5.1
    assert md.due(5.2) == 0.0 and md.take_request_topics() == ["a"]


def test_periodic_refresh():
    md = MetadataCache(refresh_interval=1.0)
    md.want(["a"])
    md.take_request_topics()
    md.update(response({1: 1}, {"a": (0, [1])}), 0.0, ["a"])
    nxt = md.due(0.0)
    assert nxt is not None and nxt > 0
    assert md.due(nxt + 0.01) == 0.0


def test_periodic_refresh_with_no_topic_wanted_is_not_due_again_at_once():
    """A client that wants no topic (an AdminClient, a producer not used yet, a consumer
    before subscribe()): the periodic refresh had its clock left in the past, and every
    later loop turn sent a Metadata request (thousands a second, from 5 minutes after
    start with the default interval)."""
    md = MetadataCache(refresh_interval=1.0)
    md.update(response({1: 1}, {}), 0.0, None)
    first = md.due(time.monotonic())          # the periodic refresh's first due time
    assert first is not None and first > 0
    assert md.due(first) == first + 1.0       # due: the clock moves on, nothing to send
    assert md.due(first + 0.001) == first + 1.0
    md.update(response({1: 1}, {"a": (0, [1])}), first, None)   # a list_topics() answer
    assert md.due(first + 1.5) == first + 2.5


def test_cluster_metadata_view():
    view = ClusterMetadata.from_response(response({1: 9001}, {"a": (0, [1, 1]),
                                                              "bad": (3, [])}), 1, "h:9001/1")
    assert view.brokers[1].port == 9001 and str(view.brokers[1]) == "h:9001/1"
    assert sorted(view.topics["a"].partitions) == [0, 1]
    assert view.topics["a"].partitions[1].leader == 1
    assert view.topics["bad"].error.code() == 3
    assert view.orig_broker_id == 1 and view.controller_id == 1


def test_partition_ids_outside_the_valid_range_are_ignored():
    """A hostile or broken Metadata answer: a negative id made update() raise IndexError
    (in the I/O thread), a huge one allocated a list of that size (client fuzz harness)."""
    from kafka_client._cluster.metadata import MAX_PARTITIONS, MetadataCache
    from kafka_proto.messages import MetadataResponse as M

    def answer(*ids):
        return M(brokers=[], topics=[M.MetadataResponseTopic(
            name="t", partitions=[M.MetadataResponsePartition(partition_index=i, leader_id=7)
                                  for i in ids])])

    cache = MetadataCache()
    cache.update(answer(-5, 1, 0), 1.0, None)
    assert cache.topics["t"].leaders == [7, 7]
    cache = MetadataCache()
    cache.update(answer(0, MAX_PARTITIONS, 2**31 - 1), 2.0, None)
    assert cache.topics["t"].leaders == [7]


def test_partition_ids_past_a_gap_are_ignored():
    """A topic's partitions are 0..n-1. An answer listing 0, 1, 2 and 1000 made the
    topic 1,001 partitions long, 998 of them leaderless: the producer's keys went to
    partitions that do not exist and 29 of 30 messages timed out (through the fault
    proxy; librdkafka keeps 4 and ignores the leader of 1000). The ids past the first
    gap are ignored, with a warning; duplicates are read once."""
    import logging

    from kafka_proto.messages import MetadataResponse as M

    def answer(*ids):
        return M(brokers=[M.MetadataResponseBroker(node_id=7, host="h", port=1)],
                 topics=[M.MetadataResponseTopic(name="t", partitions=[
                     M.MetadataResponsePartition(partition_index=i, leader_id=7)
                     for i in ids])])

    seen = []
    handler = logging.Handler()
    handler.emit = seen.append
    log = logging.getLogger("kafka_client.metadata.test")
    log.addHandler(handler)
    try:
        cache = MetadataCache(log=log)
        cache.update(answer(0, 1, 2, 1000), 1.0, None)
        assert cache.topics["t"].leaders == [7, 7, 7]
        assert [r.levelno for r in seen] == [logging.WARNING] and "1000" in seen[0].getMessage()
        cache.update(answer(2, 0, 1, 1, 0), 2.0, None)
        assert cache.topics["t"].leaders == [7, 7, 7] and len(seen) == 1
    finally:
        log.removeHandler(handler)


def test_a_leader_named_in_an_answer_is_taken_when_its_epoch_is_newer():
    """KIP-951: NOT_LEADER_OR_FOLLOWER answers of Fetch v12+/Produce v10+ name the
    current leader and its epoch."""
    md = MetadataCache()
    md.update(response({1: 9001, 2: 9002}, {"t": (0, [1, 1])}), 0.0, None)
    md.topics["t"].epochs = [3, 3]
    before = md.version
    assert not md.learn_leader("t", 0, 2, 3)        # not newer
    assert not md.learn_leader("t", 0, 7, 4)        # an unknown broker
    assert not md.learn_leader("t", 5, 2, 4)        # no such partition
    assert not md.learn_leader("x", 0, 2, 4)        # no such topic
    assert md.version == before and md.leader("t", 0) == 1
    assert md.learn_leader("t", 0, 2, 4)
    assert (md.leader("t", 0), md.leader_epoch("t", 0)) == (2, 4)
    assert (md.leader("t", 1), md.leader_epoch("t", 1)) == (1, 3)
    assert md.version > before


def test_an_older_leader_epoch_from_a_lagging_broker_does_not_replace_a_newer_one():
    import uuid

    def with_epochs(leaders, epochs, topic_id):
        resp = response({1: 9001, 2: 9002}, {"t": (0, leaders)})
        for p, e in zip(resp.topics[0].partitions, epochs):
            p.leader_epoch = e
        resp.topics[0].topic_id = topic_id
        return resp

    tid = uuid.UUID(int=5)
    md = MetadataCache()
    md.update(with_epochs([1, 1], [3, 3], tid), 0.0, None)
    assert md.learn_leader("t", 0, 2, 4)
    md.update(with_epochs([1, 1], [3, 3], tid), 1.0, None)     # a broker that lags
    assert (md.leader("t", 0), md.leader_epoch("t", 0)) == (2, 4)
    assert (md.leader("t", 1), md.leader_epoch("t", 1)) == (1, 3)
    md.update(with_epochs([1, 2], [5, 4], tid), 2.0, None)     # newer: taken
    assert [md.leader("t", p) for p in (0, 1)] == [1, 2]
    md.update(with_epochs([2, 2], [0, 0], uuid.UUID(int=6)), 3.0, None)  # made again
    assert [md.leader_epoch("t", p) for p in (0, 1)] == [0, 0]


def test_a_lagging_answer_with_fewer_partitions_does_not_shrink_the_topic():
    """A topic never loses partitions: an answer listing fewer for the same topic (a
    broker behind the controller after CreatePartitions) keeps the others and asks again
    soon; only the topic made again (another id) has fewer. (One such answer shrank the
    producer's topic until a leader moved.)"""
    import uuid

    def answer(leaders, topic_id, error=0):
        resp = response({1: 9001, 2: 9002}, {"t": (error, leaders)})
        resp.topics[0].topic_id = topic_id
        return resp

    tid = uuid.UUID(int=5)
    md = MetadataCache()
    md.want(["t"])
    md.update(answer([1, 2, 1, 2, 1, 2], tid), 0.0, ["t"])
    md.update(answer([1, 2, 1], tid), 1.0, ["t"])
    assert md.topics["t"].partition_count == 6 and md.leader("t", 5) == 2
    assert md.due(1.0) is not None and md.due(1.0) <= 1.0 + 1.0    # asked again soon
    md.update(answer([], None, error=3), 2.0, ["t"])             # deleted...
    md.update(answer([2, 2], uuid.UUID(int=6)), 3.0, ["t"])      # ... and made again
    assert md.topics["t"].partition_count == 2
    md.update(answer([2, 2, 1], uuid.UUID(int=6)), 4.0, ["t"])
    md.update(answer([2], uuid.UUID(int=7)), 5.0, ["t"])         # another id: as it says
    assert md.topics["t"].partition_count == 1
    # Without topic ids (older brokers) the same rule: fewer only after an error between.
    md2 = MetadataCache()
    md2.update(answer([1, 1, 1], None), 0.0, None)
    md2.update(answer([1], None), 1.0, None)
    assert md2.topics["t"].partition_count == 3


def test_wanted_topics_the_owner_no_longer_uses_are_forgotten_at_the_periodic_refresh():
    """A consumer's topics of subscriptions and assignments of long ago were refreshed,
    each named in every Metadata request, for the client's life: at each periodic refresh
    the owner says which are in use, and the others are forgotten."""
    md = MetadataCache(refresh_interval=10.0)
    start = md._next_periodic
    used = {"now"}
    asked_about = []

    def in_use(candidates):
        asked_about.append(set(candidates))
        return used & candidates

    md.in_use = in_use
    md.want([f"old-{i}" for i in range(100)] + ["now"])
    md.take_request_topics()
    md.update(response({1: 1}, {t: (0, [1]) for t in md.wanted}), start - 1, None)
    assert len(md.topics) == 101
    assert md.due(start - 0.5) == start and asked_about == []   # only at the refresh
    assert md.due(start) == 0.0
    assert md.take_request_topics() == ["now"]
    assert md.wanted == {"now"} and set(md.topics) == {"now"}
    assert asked_about == [{f"old-{i}" for i in range(100)} | {"now"}]
    md.update(response({1: 1}, {"now": (0, [1])}), start + 0.1, ["now"])
    # Wanted again (assigned again, say): asked for at once, as any new topic.
    md.want(["old-7"])
    used.add("old-7")
    assert md.due(start + 0.2) == 0.0
    assert md.take_request_topics() == ["old-7"]


def test_an_answer_for_every_topic_drops_the_deleted_ones_not_wanted():
    """list_topics() and a pattern subscription's look at every topic filled the cache
    with every topic that ever existed: one deleted since stayed (and a pattern still
    matched it). Wanted topics stay: they are asked for by name."""
    md = MetadataCache(refresh_interval=-1)
    md.want(["wanted-gone"])
    md.take_request_topics()
    md.update(response({1: 1}, {"a": (0, [1]), "b": (0, [1]), "wanted-gone": (0, [1])}),
              1.0, None)
    assert set(md.topics) == {"a", "b", "wanted-gone"}
    md.update(response({1: 1}, {"b": (0, [1])}), 2.0, ["b"])        # by name: no drop
    assert set(md.topics) == {"a", "b", "wanted-gone"}
    md.update(response({1: 1}, {"b": (0, [1]), "c": (0, [1])}), 3.0, None)
    assert set(md.topics) == {"b", "c", "wanted-gone"}


def test_cached_topics_nobody_wants_expire_at_max_age():
    """list_topics(topic) answers each added a cache entry for the client's life (300
    calls for 300 names: 300 entries); librdkafka's cache entries expire at
    metadata.max.age.ms, and so do these now. Wanted topics are refreshed instead."""
    md = MetadataCache(max_age=30.0, refresh_interval=10.0)
    first = md._next_periodic
    md.want(["kept"])
    md.take_request_topics()
    md.update(response({1: 1}, {"kept": (0, [1])}), first - 5, ["kept"])
    for i in range(300):
        md.update(response({1: 1}, {f"looked-up-{i}": (3, [])}), first - 5, [f"looked-up-{i}"])
    assert len(md.topics) == 301
    md.due(first)                                   # 5 s old: kept
    md.take_request_topics()
    md.update(response({1: 1}, {"kept": (0, [1])}), first, ["kept"])
    assert len(md.topics) == 301
    md.due(first + 30)                              # 35 s old: gone
    assert set(md.topics) == {"kept"}


class _CountingDict(dict):
    looked_up = 0

    def get(self, key, default=None):
        type(self).looked_up += 1
        return super().get(key, default)


def test_a_loop_turn_does_not_look_at_every_wanted_topic():
    """due() runs on every turn of the I/O loop: it looked at the age of every wanted
    topic each time (a producer of thousands of topics spent the loop's time there, in
    proportion to them). Now only when the oldest one may be stale; the rule holds."""
    md = MetadataCache(max_age=10.0, refresh_interval=-1)
    names = [f"t{i}" for i in range(1000)]
    md.want(names)
    md.take_request_topics()
    md.update(response({1: 1}, {n: (0, [1]) for n in names}), 100.0, names)
    md.topics = _CountingDict(md.topics)
    for i in range(1000):
        assert md.due(100.0 + i * 0.009) is None
    assert _CountingDict.looked_up < 1000          # was 1,000,000
    assert md.due(110.0) == 0.0
    assert md.take_request_topics() == sorted(names)
