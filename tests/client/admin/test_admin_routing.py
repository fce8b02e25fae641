"""Where the admin client's requests go, and how it retries, against scripted fake
brokers (tests/client/admin/fake_cluster.py): the controller, group coordinators and
partition leaders, their moves, unsupported APIs, lost connections and deadlines."""
from __future__ import annotations

import time

import pytest
from fake_cluster import (  # noqa: F401 (admins: a fixture)
    CLOSE,
    SILENT,
    FakeCluster,
    admins,
    error_of,
)

from kafka_client import ConsumerGroupState, ConsumerGroupTopicPartitions, TopicPartition
from kafka_client._cluster import calls as calls_module
from kafka_client._cluster.calls import MAX_LOST
from kafka_client.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourcePatternType,
    ResourceType,
)
from kafka_client._net.connection import BrokerConnection
from kafka_client.errors import KafkaError, KafkaException, client_error
from kafka_proto.errors import ErrorCode
from kafka_proto.messages import (
    AlterConfigsResponse,
    ApiKey,
    CreateAclsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteAclsResponse,
    DeleteTopicsResponse,
    DescribeAclsResponse,
    DescribeClusterResponse,
    DescribeConfigsResponse,
    DescribeGroupsResponse,
    ListGroupsResponse,
    ListOffsetsResponse,
)


def created(req, version, code=0, message=None):
    return CreateTopicsResponse(topics=[CreateTopicsResponse.CreatableTopicResult(
        name=t.name, error_code=code, error_message=message) for t in req.topics])


# --------------------------------------------------------------------------- controller


def test_create_topics_goes_to_the_controller_with_every_field_on_the_wire(admins):
    with FakeCluster(nodes=(1, 2, 3), controller=3) as cluster:
        cluster.handle(ApiKey.CREATE_TOPICS, lambda node, req, v: created(req, v))
        admin = admins(cluster)
        futures = admin.create_topics(
            [NewTopic("a", 3, 2, config={"retention.ms": 1000, "cleanup.policy": "compact"}),
             NewTopic("b", 2, replica_assignment=[[1, 2], [2, 3]]),
             NewTopic("c", replica_assignment=[[3]])],
            operation_timeout=2.5, validate_only=True)
        assert [f.result(10) for f in futures.values()] == [None, None, None]
        (node, req), = cluster.requests(ApiKey.CREATE_TOPICS)
        assert node == 3
        assert req.timeout_ms == 2500 and req.validate_only is True
        a, b, c = req.topics
        assert (a.name, a.num_partitions, a.replication_factor) == ("a", 3, 2)
        # Values that are not str go as their str(), as confluent-kafka sends them.
        assert [(c.name, c.value) for c in a.configs] == [("retention.ms", "1000"),
                                                          ("cleanup.policy", "compact")]
        # With an assignment both counts are -1 on the wire, even when the application
        # gave the partition count (confluent-kafka's NewTopic needs it): Kafka's
        # controller refuses the request otherwise.
        assert (b.num_partitions, b.replication_factor) == (-1, -1)
        assert (c.num_partitions, c.replication_factor) == (-1, -1)
        assert [(x.partition_index, x.broker_ids) for x in b.assignments] == [(0, [1, 2]),
                                                                              (1, [2, 3])]


def test_alter_configs_sends_values_that_are_not_str_as_their_str(admins):
    """confluent-kafka str()s every set_config value; ours did refuse them (TypeError)."""
    R = AlterConfigsResponse
    with FakeCluster(nodes=(1,), controller=1) as cluster:
        cluster.handle(ApiKey.ALTER_CONFIGS, lambda node, req, v: R(responses=[
            R.AlterConfigsResourceResponse(error_code=0, error_message=None,
                                           resource_type=r.resource_type,
                                           resource_name=r.resource_name)
            for r in req.resources]))
        admin = admins(cluster)
        res = ConfigResource("topic", "t", set_config={"retention.ms": 5})
        res.set_config("segment.bytes", 1 << 20)
        with pytest.warns(DeprecationWarning):
            futures = admin.alter_configs([res])
        assert [f.result(10) for f in futures.values()] == [None]
        (_, req), = cluster.requests(ApiKey.ALTER_CONFIGS)
        assert [(c.name, c.value) for c in req.resources[0].configs] == [
            ("retention.ms", "5"), ("segment.bytes", "1048576")]


def test_not_controller_makes_it_ask_metadata_again_and_follow_the_controller(admins):
    with FakeCluster(nodes=(1, 2), controller=1) as cluster:
        def create(node, req, version):
            if node == 1:
                cluster.controller = 2      # the controller moved
                return created(req, version, ErrorCode.NOT_CONTROLLER)
            return created(req, version)

        cluster.handle(ApiKey.CREATE_TOPICS, create)
        admin = admins(cluster)
        assert admin.create_topics([NewTopic("t", 1)])["t"].result(10) is None
        assert [n for n, _ in cluster.requests(ApiKey.CREATE_TOPICS)] == [1, 2]
        # the retry looked the controller up again
        kinds = [k for _n, k, _v, _r in cluster.seen]
        first, second = [i for i, k in enumerate(kinds) if k == ApiKey.CREATE_TOPICS]
        assert ApiKey.METADATA in kinds[first:second]


def test_only_the_topics_left_are_sent_again(admins):
    with FakeCluster(nodes=(1,)) as cluster:
        answers = iter([{"a": 0, "b": ErrorCode.NOT_CONTROLLER,
                         "c": ErrorCode.TOPIC_ALREADY_EXISTS},
                        {"b": 0}])

        def create(node, req, version):
            codes = next(answers)
            return CreateTopicsResponse(topics=[CreateTopicsResponse.CreatableTopicResult(
                name=t.name, error_code=codes[t.name]) for t in req.topics])

        cluster.handle(ApiKey.CREATE_TOPICS, create)
        futures = admins(cluster).create_topics([NewTopic(n, 1) for n in "abc"])
        assert futures["a"].result(10) is None and futures["b"].result(10) is None
        assert error_of(futures["c"]).code() == ErrorCode.TOPIC_ALREADY_EXISTS
        assert [[t.name for t in r.topics] for _n, r in cluster.requests(ApiKey.CREATE_TOPICS)] \
            == [["a", "b", "c"], ["b"]]


def test_a_retriable_error_until_the_deadline_fails_with_that_error(admins):
    with FakeCluster(nodes=(1,)) as cluster:
        cluster.handle(ApiKey.CREATE_TOPICS,
                       lambda node, req, v: created(req, v, ErrorCode.NOT_CONTROLLER))
        start = time.monotonic()
        err = error_of(admins(cluster).create_topics([NewTopic("t", 1)],
                                                     request_timeout=1.0)["t"])
        took = time.monotonic() - start
        assert err.code() == ErrorCode.NOT_CONTROLLER
        assert "timed out" in err.str()
        assert 0.9 <= took < 3
        assert len(cluster.requests(ApiKey.CREATE_TOPICS)) >= 5   # it kept trying


def test_an_unanswered_request_times_out_at_request_timeout(admins):
    with FakeCluster(nodes=(1,)) as cluster:
        cluster.handle(ApiKey.DELETE_TOPICS, lambda node, req, v: SILENT)
        start = time.monotonic()
        err = error_of(admins(cluster).delete_topics(["t"], request_timeout=0.8)["t"])
        assert err.code() == KafkaError._TIMED_OUT
        assert 0.7 <= time.monotonic() - start < 3
        # Final in a result (the call retried what it would), as confluent-kafka's
        # admin errors: a ported ``if err.retriable(): retry`` does not spin.
        assert not err.retriable()


def test_result_errors_are_not_retriable():
    """UNKNOWN_TOPIC_OR_PART is retriable in Kafka's table (a produce may meet it while a
    topic is being made); in an admin result it is final."""
    R = DeleteTopicsResponse
    with FakeCluster(nodes=(1,)) as cluster:
        cluster.handle(ApiKey.DELETE_TOPICS, lambda node, req, v: R(responses=[
            R.DeletableTopicResult(name=t.name,
                                   error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            for t in req.topics]))
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        try:
            err = error_of(admin.delete_topics(["nope"])["nope"])
            assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART and not err.retriable()
        finally:
            admin.close()


def test_an_api_the_broker_does_not_offer_fails_at_once_without_sending(admins):
    with FakeCluster(nodes=(1,), missing=[ApiKey.CREATE_PARTITIONS]) as cluster:
        start = time.monotonic()
        err = error_of(admins(cluster).create_partitions([NewPartitions("t", 3)])["t"])
        assert err.code() == KafkaError._UNSUPPORTED_FEATURE
        assert "CreatePartitions" in err.str() and "broker 1" in err.str()
        assert time.monotonic() - start < 2
        assert cluster.requests(ApiKey.CREATE_PARTITIONS) == []


def test_a_request_the_broker_drops_fails_after_a_few_tries(admins):
    """Tansu closes the connection on requests it cannot serve (DeleteRecords, ListOffsets
    for the max timestamp): fail promptly, not at the request timeout."""
    with FakeCluster(nodes=(1,)) as cluster:
        cluster.topics["t"] = [1]
        cluster.handle(ApiKey.DELETE_RECORDS, lambda node, req, v: CLOSE)
        start = time.monotonic()
        err = error_of(admins(cluster).delete_records([TopicPartition("t", 0, 5)],
                                                      request_timeout=30)
                       [TopicPartition("t", 0)])
        assert err.code() == KafkaError._TRANSPORT
        assert time.monotonic() - start < 5
        assert len(cluster.requests(ApiKey.DELETE_RECORDS)) == MAX_LOST + 1


def test_a_request_that_cannot_be_encoded_fails_at_once_and_is_not_retried(admins):
    """A value the wire cannot carry (a string over 32,767 bytes) is the caller's error:
    one failure naming the call and the value's limit, nothing sent, no retry as for a
    request lost with its connection."""
    with FakeCluster(nodes=(1,)) as cluster:
        admin = admins(cluster)
        start = time.monotonic()
        err = error_of(admin.create_topics(
            [NewTopic("t", 1, config={"cleanup.policy": "x" * 40000})])["t"])
        assert err.code() == KafkaError._INVALID_ARG
        assert err.str().startswith("CreateTopics to the controller: cannot encode request")
        assert "32767" in err.str() and "lost with its connection" not in err.str()
        resource = ConfigResource(ResourceType.TOPIC, "t")
        resource.add_incremental_config(ConfigEntry(
            "retention.ms", "y" * 40000, incremental_operation=AlterConfigOpType.SET))
        err = error_of(admin.incremental_alter_configs([resource])[resource])
        assert err.code() == KafkaError._INVALID_ARG and "32767" in err.str()
        assert time.monotonic() - start < 2
        assert cluster.requests(ApiKey.CREATE_TOPICS) == []
        assert cluster.requests(ApiKey.INCREMENTAL_ALTER_CONFIGS) == []


def test_a_request_that_timed_out_in_its_queue_is_sent_again(admins, monkeypatch):
    """A request failed before it was written (_TIMED_OUT_QUEUE: it waited in its
    connection's queue, in NEVER_SENT, retriable) cannot have been carried out: the call
    sends it again and succeeds, not failing with that error as with one that cannot
    be encoded."""
    never_sent = []
    send = BrokerConnection.send

    def queue_times_out_once(conn, msg, callback=None, **kwargs):
        if isinstance(msg, CreateTopicsRequest) and not never_sent:
            never_sent.append(msg)
            error = client_error(KafkaError._TIMED_OUT_QUEUE, "request timed out in queue "
                                 "after 0s, never sent (connection READY)")
            conn.io.call_soon(callback, None, error)   # as the connection fails it
            return
        send(conn, msg, callback, **kwargs)

    monkeypatch.setattr(BrokerConnection, "send", queue_times_out_once)
    with FakeCluster(nodes=(1,)) as cluster:
        cluster.handle(ApiKey.CREATE_TOPICS, lambda node, req, v: created(req, v))
        future = admins(cluster).create_topics([NewTopic("t", 1)], request_timeout=30)["t"]
        assert future.result(10) is None
        assert len(never_sent) == 1
        assert [(node, [t.name for t in req.topics])
                for node, req in cluster.requests(ApiKey.CREATE_TOPICS)] == [(1, ["t"])]


def test_operation_timeouts_on_the_wire(admins):
    """0 (answer at once) by default, as librdkafka; DeleteRecords waits as long as the
    request may; -1 means the request timeout too."""
    from kafka_proto.messages import DeleteRecordsResponse

    with FakeCluster(nodes=(1,)) as cluster:
        cluster.topics["t"] = [1]
        cluster.handle(ApiKey.CREATE_TOPICS, lambda node, req, v: created(req, v))
        cluster.handle(ApiKey.DELETE_TOPICS, lambda node, req, v: DeleteTopicsResponse(
            responses=[DeleteTopicsResponse.DeletableTopicResult(name=t.name, error_code=0)
                       for t in req.topics]))
        cluster.handle(ApiKey.DELETE_RECORDS, lambda node, req, v: DeleteRecordsResponse(
            topics=[DeleteRecordsResponse.DeleteRecordsTopicResult(name="t", partitions=[
                DeleteRecordsResponse.DeleteRecordsPartitionResult(
                    partition_index=0, low_watermark=3, error_code=0)])]))
        admin = admins(cluster)
        admin.create_topics([NewTopic("a", 1)], request_timeout=7)["a"].result(10)
        admin.delete_topics(["a"], request_timeout=7, operation_timeout=-1)["a"].result(10)
        tp = TopicPartition("t", 0, 3)
        assert admin.delete_records([tp], request_timeout=7)[tp].result(10).low_watermark == 3
        assert [r.timeout_ms for _n, r in cluster.requests(ApiKey.CREATE_TOPICS)] == [0]
        assert [r.timeout_ms for _n, r in cluster.requests(ApiKey.DELETE_TOPICS)] == [7000]
        assert [r.timeout_ms for _n, r in cluster.requests(ApiKey.DELETE_RECORDS)] == [7000]


# --------------------------------------------------------------------------- coordinator


def described(group, state="Stable", code=0):
    return DescribeGroupsResponse(groups=[DescribeGroupsResponse.DescribedGroup(
        error_code=code, group_id=group, group_state=state, protocol_type="consumer",
        protocol_data="range", members=[])])


def test_group_requests_follow_the_coordinator_when_it_moves(admins):
    with FakeCluster(nodes=(1, 2)) as cluster:
        cluster.coordinator = 1

        def describe(node, req, version):
            if node == 1:
                cluster.coordinator = 2
                return described(req.groups[0], code=ErrorCode.NOT_COORDINATOR)
            return described(req.groups[0])

        cluster.handle(ApiKey.DESCRIBE_GROUPS, describe)
        desc = admins(cluster).describe_consumer_groups(["g"])["g"].result(10)
        assert desc.state == ConsumerGroupState.STABLE and desc.partition_assignor == "range"
        assert desc.coordinator.id == 2 and desc.coordinator.port == cluster.ports[2]
        assert [n for n, _ in cluster.requests(ApiKey.DESCRIBE_GROUPS)] == [1, 2]
        assert len(cluster.requests(ApiKey.FIND_COORDINATOR)) == 2


def test_a_loading_coordinator_is_asked_again_without_a_new_lookup(admins):
    with FakeCluster(nodes=(1,)) as cluster:
        codes = iter([ErrorCode.COORDINATOR_LOAD_IN_PROGRESS] * 2 + [0])
        cluster.handle(ApiKey.DESCRIBE_GROUPS,
                       lambda node, req, v: described(req.groups[0], code=next(codes)))
        assert admins(cluster).describe_consumer_groups(["g"])["g"].result(10).group_id == "g"
        assert len(cluster.requests(ApiKey.DESCRIBE_GROUPS)) == 3
        assert len(cluster.requests(ApiKey.FIND_COORDINATOR)) == 1


def test_the_coordinator_cache_is_bounded(admins, monkeypatch):
    """One coordinator per group ever described was kept for ever (a monitoring tool
    walking ephemeral groups grew without bound): the least recently found goes."""
    monkeypatch.setattr(calls_module, "MAX_COORDINATORS", 3)
    with FakeCluster(nodes=(1,)) as cluster:
        cluster.handle(ApiKey.DESCRIBE_GROUPS, lambda node, req, v: described(req.groups[0]))
        admin = admins(cluster)
        for i in range(5):
            assert admin.describe_consumer_groups([f"g{i}"])[f"g{i}"].result(10)
        assert sorted(k[1] for k in admin._runner.coordinators) == ["g2", "g3", "g4"]
        assert admin.describe_consumer_groups(["g0"])["g0"].result(10)   # looked up again
        assert len(cluster.requests(ApiKey.FIND_COORDINATOR)) == 6


def test_describe_cluster_answered_not_controller_is_asked_again(admins):
    """A DescribeCluster answered NOT_CONTROLLER (a broker in transition) is asked again,
    as the Java client does; it failed the future at once."""
    R = DescribeClusterResponse
    answers = iter([ErrorCode.NOT_CONTROLLER, 0])
    with FakeCluster(nodes=(1,)) as cluster:
        cluster.handle(ApiKey.DESCRIBE_CLUSTER, lambda node, req, v: R(
            error_code=next(answers), error_message=None, cluster_id="c1", controller_id=1,
            brokers=[R.DescribeClusterBroker(broker_id=1, host="127.0.0.1",
                                             port=cluster.ports[1], rack=None)],
            cluster_authorized_operations=-2147483648))
        result = admins(cluster).describe_cluster().result(10)
        assert result.cluster_id == "c1" and [n.id for n in result.nodes] == [1]
        assert len(cluster.requests(ApiKey.DESCRIBE_CLUSTER)) == 2


def test_the_coordinator_lookup_is_shared_and_cached(admins):
    with FakeCluster(nodes=(1,)) as cluster:
        cluster.handle(ApiKey.DESCRIBE_GROUPS, lambda node, req, v: described(req.groups[0]))
        admin = admins(cluster)
        for f in admin.describe_consumer_groups(["g1", "g2"]).values():
            f.result(10)
        admin.describe_consumer_groups(["g1"])["g1"].result(10)
        keys = sorted(k for _n, r in cluster.requests(ApiKey.FIND_COORDINATOR)
                      for k in (r.coordinator_keys or [r.key]))
        assert keys == ["g1", "g2"]


def test_a_find_coordinator_answer_naming_no_usable_broker_is_asked_again(admins):
    """FindCoordinator answers without an error that name nobody usable: no entry (or
    none for the key asked), node -1, no host, port -1. Each is taken as "not available"
    and asked again after the backoff; the call goes to the broker named next. Taken as
    they came, an empty list became node 0 at host "" (the call failed to resolve it until
    its timeout) and node -1 the bootstrap connection's id; librdkafka asks again too."""
    from kafka_proto.messages import FindCoordinatorResponse as R

    with FakeCluster(nodes=(1, 2)) as cluster:
        cluster.coordinator = 2
        hostile = iter([
            lambda req: [],
            lambda req: [R.Coordinator(key="another-group", node_id=2, host="127.0.0.1",
                                       port=cluster.ports[2], error_code=0)],
            lambda req: [R.Coordinator(key=k, node_id=-1, host="127.0.0.1",
                                       port=cluster.ports[1], error_code=0)
                         for k in req.coordinator_keys],
            lambda req: [R.Coordinator(key=k, node_id=2, host="", port=cluster.ports[2],
                                       error_code=0) for k in req.coordinator_keys],
            lambda req: [R.Coordinator(key=k, node_id=2, host="127.0.0.1", port=-1,
                                       error_code=0) for k in req.coordinator_keys],
        ])

        def find(node, req, version):
            entries = next(hostile, None)
            if entries is None:
                return cluster.find_coordinator(node, req, version)
            return R(coordinators=entries(req))

        cluster.handle(ApiKey.FIND_COORDINATOR, find)
        cluster.handle(ApiKey.DESCRIBE_GROUPS, lambda node, req, v: described(req.groups[0]))
        admin = admins(cluster)
        assert admin.describe_consumer_groups(["g"], request_timeout=10)["g"].result(10)
        assert len(cluster.requests(ApiKey.FIND_COORDINATOR)) == 6
        assert [n for n, _r in cluster.requests(ApiKey.DESCRIBE_GROUPS)] == [2]
        # nothing but the real brokers was learnt from the answers
        assert set(admin._cluster.metadata.brokers) <= {1, 2}


def test_a_non_retriable_find_coordinator_error_fails_the_group_call(admins):
    with FakeCluster(nodes=(1,)) as cluster:
        from kafka_proto.messages import FindCoordinatorResponse

        cluster.handle(ApiKey.FIND_COORDINATOR, lambda node, req, v: FindCoordinatorResponse(
            coordinators=[FindCoordinatorResponse.Coordinator(
                key=k, node_id=-1, host="", port=-1,
                error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
                for k in req.coordinator_keys]))
        err = error_of(admins(cluster).delete_consumer_groups(["g"])["g"])
        assert err.code() == ErrorCode.GROUP_AUTHORIZATION_FAILED
        assert cluster.requests(ApiKey.DELETE_GROUPS) == []


# --------------------------------------------------------------------------- leaders


def offsets_answer(req, offset, code=0):
    return ListOffsetsResponse(topics=[ListOffsetsResponse.ListOffsetsTopicResponse(
        name=t.name, partitions=[ListOffsetsResponse.ListOffsetsPartitionResponse(
            partition_index=p.partition_index, error_code=code, timestamp=-1,
            offset=offset + p.partition_index, leader_epoch=7) for p in t.partitions])
        for t in req.topics])


def test_list_offsets_goes_to_each_leader_and_follows_a_leader_change(admins):
    with FakeCluster(nodes=(1, 2)) as cluster:
        cluster.topics["t"] = [1, 2, 1]

        def answer(node, req, version):
            if node == 1 and cluster.topics["t"][0] == 1:
                cluster.topics["t"] = [2, 2, 2]   # node 1 lost its leaderships
                return offsets_answer(req, 0, ErrorCode.NOT_LEADER_OR_FOLLOWER)
            return offsets_answer(req, 100 * node)

        cluster.handle(ApiKey.LIST_OFFSETS, answer)
        futures = admins(cluster).list_offsets(
            {TopicPartition("t", p): OffsetSpec.latest() for p in range(3)})
        got = {tp.partition: f.result(10) for tp, f in futures.items()}
        assert {p: r.offset for p, r in got.items()} == {0: 200, 1: 201, 2: 202}
        assert got[0].leader_epoch == 7
        sent = [(n, sorted(p.partition_index for t in r.topics for p in t.partitions))
                for n, r in cluster.requests(ApiKey.LIST_OFFSETS)]
        # (node 2's first request may wait for its connection: order between it and the
        # re-routed one is free)
        assert sorted(sent) == [(1, [0, 2]), (2, [0, 2]), (2, [1])]
        assert all(p.timestamp == -1 for _n, r in cluster.requests(ApiKey.LIST_OFFSETS)
                   for t in r.topics for p in t.partitions)


@pytest.mark.parametrize("elected", [False, True])
def test_a_partition_without_a_leader_waits_alone_for_one(admins, elected):
    """A partition the metadata shows without a leader (-1) does not hold back the
    others, which are answered at once, and is never sent to a broker before it has a
    leader: routed when one is elected, else failed LEADER_NOT_AVAILABLE when the call's
    time is up, naming that."""
    with FakeCluster(nodes=(1, 2)) as cluster:
        cluster.topics["t"] = [1, -1, 2]
        cluster.handle(ApiKey.LIST_OFFSETS, lambda node, req, version:
                       offsets_answer(req, 100 * node))
        start = time.monotonic()
        futures = admins(cluster).list_offsets(
            {TopicPartition("t", p): OffsetSpec.latest() for p in range(3)},
            request_timeout=4.0)    # long: the bound below is well under it
        got = {tp.partition: f for tp, f in futures.items()}
        assert got[0].result(5).offset == 100 and got[2].result(5).offset == 202
        # Not held until the deadline (4 s; it was 1.5 s with this bound 1 s, which a
        # loaded machine could stretch the two answers past).
        assert time.monotonic() - start < 3.0
        assert not got[1].done()
        if elected:
            cluster.topics["t"] = [1, 2, 2]
            assert got[1].result(5).offset == 201
        else:
            err = error_of(got[1])
            assert err.code() == ErrorCode.LEADER_NOT_AVAILABLE, err
            assert "no leader before the request timed out" in err.str()
            assert 3.7 < time.monotonic() - start < 8.0
        sent = sorted((n, sorted(p.partition_index for t in r.topics for p in t.partitions))
                      for n, r in cluster.requests(ApiKey.LIST_OFFSETS))
        assert sent == ([(1, [0]), (2, [1]), (2, [2])] if elected else [(1, [0]), (2, [2])])


def test_a_partition_without_a_leader_fails_with_that_when_the_last_lookup_is_cut_off(
        admins):
    """The partition had no leader at every lookup answered; the last lookup is still
    unanswered when the call's time is up: the partition fails LEADER_NOT_AVAILABLE (why
    it was not sent), not the cut-off lookup's _TIMED_OUT ("no broker answered the
    Metadata request in time"), which the load of the machine decided."""
    with FakeCluster(nodes=(1, 2)) as cluster:
        cluster.topics["t"] = [-1]
        lookups = []

        def metadata(node, req, version):
            lookups.append(node)
            return cluster.metadata(node, req, version) if len(lookups) <= 2 else SILENT

        cluster.handle(ApiKey.METADATA, metadata)
        futures = admins(cluster).list_offsets({TopicPartition("t", 0): OffsetSpec.latest()},
                                               request_timeout=1.0)
        err = error_of(futures[TopicPartition("t", 0)])
        assert len(lookups) > 2                       # a lookup was cut off
        assert err.code() == ErrorCode.LEADER_NOT_AVAILABLE, err
        assert "no leader before the request timed out" in err.str()
        assert cluster.requests(ApiKey.LIST_OFFSETS) == []


def test_unknown_topics_and_partitions_fail_at_once(admins):
    with FakeCluster(nodes=(1,)) as cluster:
        cluster.topics["t"] = [1]
        cluster.handle(ApiKey.LIST_OFFSETS, lambda node, req, v: offsets_answer(req, 5))
        futures = admins(cluster).list_offsets({
            TopicPartition("t", 0): OffsetSpec.earliest(),
            TopicPartition("t", 3): OffsetSpec.earliest(),
            TopicPartition("nope", 0): OffsetSpec.earliest()})
        results = {(tp.topic, tp.partition): f for tp, f in futures.items()}
        assert results[("t", 0)].result(10).offset == 5
        assert error_of(results[("t", 3)]).code() == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert error_of(results[("nope", 0)]).code() == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        (_n, req), = cluster.requests(ApiKey.LIST_OFFSETS)
        assert [(t.name, [p.partition_index for p in t.partitions]) for t in req.topics] \
            == [("t", [0])]


def test_max_timestamp_needs_list_offsets_v7(admins):
    with FakeCluster(nodes=(1,)) as cluster:
        cluster.apis[ApiKey.LIST_OFFSETS] = (0, 6)
        cluster.topics["t"] = [1]
        err = error_of(admins(cluster).list_offsets(
            {TopicPartition("t", 0): OffsetSpec.max_timestamp()})[TopicPartition("t", 0)])
        assert err.code() == KafkaError._UNSUPPORTED_FEATURE and "version 7" in err.str()
        assert cluster.requests(ApiKey.LIST_OFFSETS) == []


# --------------------------------------------------------------------------- other targets


def test_broker_config_resources_go_to_their_broker(admins):
    with FakeCluster(nodes=(1, 2, 3)) as cluster:
        def describe(node, req, version):
            return DescribeConfigsResponse(results=[
                DescribeConfigsResponse.DescribeConfigsResult(
                    error_code=0, resource_type=r.resource_type, resource_name=r.resource_name,
                    configs=[DescribeConfigsResponse.DescribeConfigsResourceResult(
                        name="answered.by", value=str(node), read_only=True, config_source=4,
                        is_sensitive=False)])
                for r in req.resources])

        cluster.handle(ApiKey.DESCRIBE_CONFIGS, describe)
        admin = admins(cluster)
        futures = admin.describe_configs([ConfigResource("broker", "2"),
                                          ConfigResource("broker", "3"),
                                          ConfigResource("topic", "t")])
        values = {r.name: f.result(10)["answered.by"] for r, f in futures.items()}
        assert values["2"].value == "2" and values["3"].value == "3"
        entry = values["2"]
        # The broker's number, as confluent-kafka's entries carry it.
        assert entry.is_read_only and entry.source == ConfigSource.STATIC_BROKER_CONFIG.value
        assert type(entry.source) is int
        by_node = {n: [(x.resource_type, x.resource_name) for x in r.resources]
                   for n, r in cluster.requests(ApiKey.DESCRIBE_CONFIGS)}
        assert by_node[2] == [(4, "2")] and by_node[3] == [(4, "3")]
        assert (2, "t") in sum(by_node.values(), [])
        err = error_of(admin.describe_configs([ConfigResource("broker", "9")])[
            ConfigResource("broker", "9")])
        assert err.code() == KafkaError._UNKNOWN_BROKER and "broker 9" in err.str()


def test_list_consumer_groups_asks_every_broker_and_reports_the_ones_that_fail(admins):
    with FakeCluster(nodes=(1, 2, 3)) as cluster:
        def listing(node, req, version):
            if node == 3:
                return ListGroupsResponse(error_code=ErrorCode.UNKNOWN_SERVER_ERROR, groups=[])
            return ListGroupsResponse(error_code=0, groups=[
                ListGroupsResponse.ListedGroup(group_id=f"g{node}", protocol_type="consumer",
                                               group_state="Stable", group_type="classic"),
                ListGroupsResponse.ListedGroup(group_id=f"connect{node}",
                                               protocol_type="connect")])

        cluster.handle(ApiKey.LIST_GROUPS, listing)
        result = admins(cluster).list_consumer_groups(
            states={ConsumerGroupState.STABLE}).result(10)
        assert sorted(g.group_id for g in result.valid) == ["g1", "g2"]
        assert all(g.state == ConsumerGroupState.STABLE for g in result.valid)
        assert [e.code() for e in result.errors] == [ErrorCode.UNKNOWN_SERVER_ERROR]
        assert sorted(n for n, _ in cluster.requests(ApiKey.LIST_GROUPS)) == [1, 2, 3]
        assert all(r.states_filter == ["Stable"]
                   for _n, r in cluster.requests(ApiKey.LIST_GROUPS))


def test_list_consumer_groups_asks_only_the_brokers_the_cluster_lists_now(admins):
    """A broker the last Metadata answer no longer names (stopped, removed) is not asked:
    it cost every listing its whole request timeout and an error (list_groups() raised
    _PARTIAL) all through a rolling restart."""
    with FakeCluster(nodes=(1, 2, 3)) as cluster:
        listed = {1, 2, 3}

        def metadata(node, req, version):
            resp = cluster.metadata(node, req, version)
            resp.brokers = [b for b in resp.brokers if b.node_id in listed]
            return resp

        cluster.handle(ApiKey.METADATA, metadata)
        cluster.handle(ApiKey.LIST_GROUPS,
                       lambda node, req, version: ListGroupsResponse(error_code=0, groups=[]))
        admin = admins(cluster)
        assert admin.list_consumer_groups().result(10).errors == []
        assert sorted(n for n, _ in cluster.requests(ApiKey.LIST_GROUPS)) == [1, 2, 3]
        listed.discard(3)
        before = len(cluster.requests(ApiKey.LIST_GROUPS))
        assert admin.list_consumer_groups().result(10).errors == []
        assert sorted(n for n, _ in cluster.requests(ApiKey.LIST_GROUPS)[before:]) == [1, 2]


def test_list_consumer_groups_keeps_its_request_timeout_while_metadata_waits(admins):
    """The Metadata request that learns the brokers is shared and bounded by the socket
    timeout; a listing with a shorter request_timeout fails at its own (it waited for
    the shared request: 60 s with socket.timeout.ms' default)."""
    with FakeCluster(nodes=(1,)) as cluster:
        admin = admins(cluster)
        assert admin.cluster_id(5) == "fake-cluster"
        cluster.handle(ApiKey.METADATA, lambda node, req, version: SILENT)
        start = time.monotonic()
        err = error_of(admin.list_consumer_groups(request_timeout=1), timeout=10)
        assert err.code() == KafkaError._TIMED_OUT and time.monotonic() - start < 3


def test_list_groups_describes_each_group_on_the_broker_that_listed_it(admins):
    """The legacy list_groups(): ListGroups to every broker, then one DescribeGroups per
    broker for its own groups (or the one asked for); a broker that cannot be asked makes
    the whole call fail with _PARTIAL, as librdkafka's."""
    with FakeCluster(nodes=(1, 2, 3)) as cluster:
        broken = {3}

        def listing(node, req, version):
            if node in broken:
                return ListGroupsResponse(error_code=ErrorCode.UNKNOWN_SERVER_ERROR, groups=[])
            return ListGroupsResponse(error_code=0, groups=[
                ListGroupsResponse.ListedGroup(group_id=f"g{node}", protocol_type="consumer"),
                ListGroupsResponse.ListedGroup(group_id=f"connect{node}",
                                               protocol_type="connect")])

        def describe(node, req, version):
            R = DescribeGroupsResponse
            return R(groups=[R.DescribedGroup(
                error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED if g.startswith("connect")
                else 0, group_id=g, group_state="Stable", protocol_type="consumer",
                protocol_data="range", members=[R.DescribedGroupMember(
                    member_id=f"m-{g}", client_id="c", client_host="/127.0.0.1",
                    member_metadata=b"meta", member_assignment=b"assign")])
                for g in req.groups])

        cluster.handle(ApiKey.LIST_GROUPS, listing)
        cluster.handle(ApiKey.DESCRIBE_GROUPS, describe)
        admin = admins(cluster)
        with pytest.warns(DeprecationWarning):
            with pytest.raises(KafkaException) as ei:
                admin.list_groups(timeout=10)
        assert ei.value.args[0].code() == KafkaError._PARTIAL
        broken.clear()
        with pytest.warns(DeprecationWarning):
            groups = {g.id: g for g in admin.list_groups(timeout=10)}
        assert sorted(groups) == ["connect1", "connect2", "connect3", "g1", "g2", "g3"]
        g2 = groups["g2"]
        assert (g2.broker.id, g2.broker.port, g2.state, g2.protocol_type, g2.protocol,
                g2.error) == (2, cluster.ports[2], "Stable", "consumer", "range", None)
        (m,) = g2.members
        assert (m.id, m.client_id, m.client_host, m.metadata, m.assignment) == (
            "m-g2", "c", "/127.0.0.1", b"meta", b"assign")
        assert groups["connect1"].error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
        described_on = sorted((n, list(r.groups))
                              for n, r in cluster.requests(ApiKey.DESCRIBE_GROUPS))
        assert described_on == [(1, ["g1", "connect1"]), (1, ["g1", "connect1"]),
                                (2, ["g2", "connect2"]), (2, ["g2", "connect2"]),
                                (3, ["g3", "connect3"])]
        with pytest.warns(DeprecationWarning):
            assert [g.id for g in admin.list_groups("g3", timeout=10)] == ["g3"]
        node, req = cluster.requests(ApiKey.DESCRIBE_GROUPS)[-1]
        assert (node, list(req.groups)) == (3, ["g3"])


def test_scram_calls_and_elect_leaders_go_to_the_controller(admins):
    from kafka_client import ElectionType
    from kafka_client.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )
    from kafka_proto.messages import (
        AlterUserScramCredentialsResponse,
        DescribeUserScramCredentialsResponse,
        ElectLeadersResponse,
    )

    with FakeCluster(nodes=(1, 2), controller=2) as cluster:
        answers = iter([ErrorCode.NOT_CONTROLLER, 0])

        def alter(node, req, version):
            R = AlterUserScramCredentialsResponse
            users = [u.name for u in req.upsertions] + [d.name for d in req.deletions]
            code = next(answers)
            return R(results=[R.AlterUserScramCredentialsResult(user=u, error_code=code)
                              for u in users])

        def describe(node, req, version):
            R = DescribeUserScramCredentialsResponse
            return R(error_code=0, results=[R.DescribeUserScramCredentialsResult(
                user="bob", error_code=0, credential_infos=[R.CredentialInfo(
                    mechanism=2, iterations=8192)])])

        def elect(node, req, version):
            R = ElectLeadersResponse
            return R(error_code=0, replica_election_results=[R.ReplicaElectionResult(
                topic="t", partition_result=[
                    R.PartitionResult(partition_id=0, error_code=0),
                    R.PartitionResult(partition_id=1,
                                      error_code=ErrorCode.ELECTION_NOT_NEEDED)])])

        cluster.handle(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, alter)
        cluster.handle(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, describe)
        cluster.handle(ApiKey.ELECT_LEADERS, elect)
        admin = admins(cluster)
        futures = admin.alter_user_scram_credentials([
            UserScramCredentialUpsertion("bob", ScramCredentialInfo(
                ScramMechanism.SCRAM_SHA_512, 8192), b"pw", b"salt"),
            UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_256)])
        assert {u: f.exception(10) for u, f in futures.items()} == {"bob": None, "carol": None}
        sent = [r for _n, r in cluster.requests(ApiKey.ALTER_USER_SCRAM_CREDENTIALS)]
        assert len(sent) == 2   # NOT_CONTROLLER, then again after a metadata refresh
        (up,) = sent[-1].upsertions
        assert (up.name, up.mechanism, up.iterations, bytes(up.salt)) == (
            "bob", 2, 8192, b"salt")
        import hashlib
        assert bytes(up.salted_password) == hashlib.pbkdf2_hmac("sha512", b"pw", b"salt", 8192)
        assert [(d.name, d.mechanism) for d in sent[-1].deletions] == [("carol", 1)]
        every = admin.describe_user_scram_credentials().result(10)
        (info,) = every["bob"].scram_credential_infos
        assert (info.mechanism, info.iterations) == (ScramMechanism.SCRAM_SHA_512, 8192)
        assert cluster.requests(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS)[-1][1].users is None
        result = admin.elect_leaders(ElectionType.UNCLEAN, [TopicPartition("t", 0),
                                                          TopicPartition("t", 1)],
                                     operation_timeout=3).result(10)
        assert result[TopicPartition("t", 0)] is None
        assert result[TopicPartition("t", 1)].code() == KafkaError.ELECTION_NOT_NEEDED
        node, req = cluster.requests(ApiKey.ELECT_LEADERS)[-1]
        assert (node, req.election_type, req.timeout_ms) == (2, 1, 3000)
        assert [(t.topic, list(t.partitions)) for t in req.topic_partitions] == [("t", [0, 1])]
        admin.elect_leaders(ElectionType.PREFERRED).result(10)
        assert cluster.requests(ApiKey.ELECT_LEADERS)[-1][1].topic_partitions is None
        assert {n for n, _ in cluster.requests(ApiKey.ALTER_USER_SCRAM_CREDENTIALS)
                + cluster.requests(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS)
                + cluster.requests(ApiKey.ELECT_LEADERS)} == {2}


def test_describe_cluster_falls_back_to_metadata(admins):
    with FakeCluster(nodes=(4, 5), controller=5, missing=[ApiKey.DESCRIBE_CLUSTER]) as cluster:
        result = admins(cluster).describe_cluster().result(10)
        assert result.cluster_id == "fake-cluster"
        assert result.controller.id == 5
        assert sorted((n.id, n.port) for n in result.nodes) == sorted(cluster.ports.items())


def test_describe_cluster_falls_back_to_metadata_v10_for_authorized_operations(admins):
    """A broker without DescribeCluster but with Metadata v11+: the fallback asked the
    newest Metadata, which has no cluster authorized operations, and failed with
    _UNSUPPORTED_FEATURE; v10 is asked, as librdkafka asks it."""
    with FakeCluster(nodes=(1,), missing=[ApiKey.DESCRIBE_CLUSTER]) as cluster:
        result = admins(cluster).describe_cluster(
            include_authorized_operations=True).result(10)
        assert result.cluster_id == "fake-cluster"
        asked = [(v, r.include_cluster_authorized_operations)
                 for _n, k, v, r in cluster.seen if k == ApiKey.METADATA and r.topics == []]
        assert asked == [(10, True)]


def test_authorized_operations_are_asked_for_and_decoded(admins):
    """KIP-430: a bit per AclOperation; neither test broker fills them in."""
    bits = (1 << AclOperation.READ.value) | (1 << AclOperation.WRITE.value) | \
        (1 << AclOperation.DESCRIBE.value)
    with FakeCluster(nodes=(1,)) as cluster:
        cluster.topics["t"] = [1]

        def metadata(node, req, version):
            resp = cluster.metadata(node, req, version)
            for t in resp.topics:
                t.topic_authorized_operations = bits
            return resp

        cluster.handle(ApiKey.METADATA, metadata)
        admin = admins(cluster)
        from kafka_client import TopicCollection

        desc = admin.describe_topics(TopicCollection(["t"]),
                                     include_authorized_operations=True)["t"].result(10)
        assert desc.authorized_operations == [AclOperation.READ, AclOperation.WRITE,
                                              AclOperation.DESCRIBE]
        assert admin.describe_topics(TopicCollection(["t"]))["t"].result(10) \
            .authorized_operations is None
        flags = [r.include_topic_authorized_operations
                 for _n, r in cluster.requests(ApiKey.METADATA) if r.topics]
        assert flags == [True, False]


def test_alter_consumer_group_offsets_commits_as_a_non_member(admins):
    from kafka_proto.messages import OffsetCommitResponse

    with FakeCluster(nodes=(1,)) as cluster:
        cluster.handle(ApiKey.OFFSET_COMMIT, lambda node, req, v: OffsetCommitResponse(topics=[
            OffsetCommitResponse.OffsetCommitResponseTopic(name=t.name, partitions=[
                OffsetCommitResponse.OffsetCommitResponsePartition(
                    partition_index=p.partition_index,
                    error_code=ErrorCode.OFFSET_METADATA_TOO_LARGE if p.partition_index else 0)
                for p in t.partitions]) for t in req.topics]))
        res = admins(cluster).alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
            "g", [TopicPartition("t", 0, 5, "meta"), TopicPartition("t", 1, 9)])])["g"]
        parts = res.result(10).topic_partitions
        assert [(tp.offset, tp.error) for tp in parts] == [
            (5, None), (9, KafkaError(ErrorCode.OFFSET_METADATA_TOO_LARGE))]
        (_n, req), = cluster.requests(ApiKey.OFFSET_COMMIT)
        assert (req.generation_id_or_member_epoch, req.member_id) == (-1, "")
        assert [(p.partition_index, p.committed_offset, p.committed_metadata)
                for p in req.topics[0].partitions] == [(0, 5, "meta\x00"), (1, 9, "")]


# --------------------------------------------------------------------------- ACLs


def test_acl_calls_carry_their_bindings_and_filters(admins):
    """Neither test broker has an authorizer (noida-db refuses, Tansu half-implements), so
    the full ACL round trip is checked here, field by field on the wire."""
    binding = AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.PREFIXED,
                         "User:alice", "*", AclOperation.WRITE, AclPermissionType.ALLOW)
    other = AclBinding(ResourceType.GROUP, "g", ResourcePatternType.LITERAL, "User:bob",
                       "10.0.0.1", AclOperation.READ, AclPermissionType.DENY)
    with FakeCluster(nodes=(1,)) as cluster:
        cluster.handle(ApiKey.CREATE_ACLS, lambda node, req, v: CreateAclsResponse(results=[
            CreateAclsResponse.AclCreationResult(
                error_code=ErrorCode.INVALID_REQUEST if c.principal == "User:bob" else 0,
                error_message="no bob" if c.principal == "User:bob" else None)
            for c in req.creations]))
        cluster.handle(ApiKey.DESCRIBE_ACLS, lambda node, req, v: DescribeAclsResponse(
            error_code=0, resources=[DescribeAclsResponse.DescribeAclsResource(
                resource_type=2, resource_name="orders", pattern_type=4,
                acls=[DescribeAclsResponse.AclDescription(principal="User:alice", host="*",
                                                          operation=4, permission_type=3)])]))
        cluster.handle(ApiKey.DELETE_ACLS, lambda node, req, v: DeleteAclsResponse(
            filter_results=[DeleteAclsResponse.DeleteAclsFilterResult(
                error_code=0, matching_acls=[DeleteAclsResponse.DeleteAclsMatchingAcl(
                    error_code=0, resource_type=2, resource_name="orders", pattern_type=4,
                    principal="User:alice", host="*", operation=4, permission_type=3)])]))
        admin = admins(cluster)
        futures = admin.create_acls([binding, other])
        assert futures[binding].result(10) is None
        err = error_of(futures[other])
        assert err.code() == ErrorCode.INVALID_REQUEST and err.str() == "no bob"
        (_n, req), = cluster.requests(ApiKey.CREATE_ACLS)
        c = req.creations[0]
        assert (c.resource_type, c.resource_name, c.resource_pattern_type, c.principal, c.host,
                c.operation, c.permission_type) == (2, "orders", 4, "User:alice", "*", 4, 3)

        flt = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.MATCH, "User:alice",
                               None, AclOperation.ANY, AclPermissionType.ANY)
        assert admin.describe_acls(flt).result(10) == [binding]
        (_n, req), = cluster.requests(ApiKey.DESCRIBE_ACLS)
        assert (req.resource_type_filter, req.resource_name_filter, req.pattern_type_filter,
                req.principal_filter, req.host_filter, req.operation,
                req.permission_type) == (1, None, 2, "User:alice", None, 1, 1)
        assert admin.delete_acls([flt])[flt].result(10) == [binding]


# --------------------------------------------------------------------------- lifetime


def test_close_fails_what_is_still_running(admins):
    with FakeCluster(nodes=(1,)) as cluster:
        cluster.handle(ApiKey.DELETE_TOPICS, lambda node, req, v: SILENT)
        admin = admins(cluster)
        fut = admin.delete_topics(["t"], request_timeout=60)["t"]
        deadline = time.monotonic() + 5
        while not cluster.requests(ApiKey.DELETE_TOPICS) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(admin) == 1
        admin.close()
        assert error_of(fut, timeout=5).code() == KafkaError._DESTROY
        assert len(admin) == 0
        with pytest.raises(RuntimeError):
            admin.delete_topics(["t"])


def test_close_from_a_done_callback_returns_at_once():
    """Done callbacks run on the client's I/O thread; one that closes the client ("when
    this finishes, close") waited 3 s for a stop queued behind itself."""
    with FakeCluster(nodes=(1,)) as cluster:
        cluster.handle(ApiKey.CREATE_TOPICS, lambda node, req, v: created(req, v))
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        took = []

        def close_now(_future):
            start = time.monotonic()
            admin.close()
            took.append(time.monotonic() - start)

        admin.create_topics([NewTopic("x", 1)])["x"].add_done_callback(close_now)
        deadline = time.monotonic() + 5
        while not took and time.monotonic() < deadline:
            time.sleep(0.01)
        assert took and took[0] < 1
        with pytest.raises(RuntimeError):
            admin.delete_topics(["t"])


def test_close_fails_calls_still_waiting_for_a_broker():
    """No broker answers at all: the calls wait for a connection or a lookup, and close()
    ends them too."""
    admin = AdminClient({"bootstrap.servers": "127.0.0.1:1"})
    futures = [admin.list_consumer_groups(request_timeout=60),
               admin.describe_consumer_groups(["g"], request_timeout=60)["g"],
               admin.list_offsets({TopicPartition("t", 0): OffsetSpec.latest()},
                                  request_timeout=60)[TopicPartition("t", 0)]]
    time.sleep(0.2)
    start = time.monotonic()
    admin.close()
    for f in futures:
        assert error_of(f, timeout=1).code() == KafkaError._DESTROY
    assert time.monotonic() - start < 5


def thread_ends(name, timeout=5.0):
    """Whether the thread ``name`` ends within ``timeout`` (collecting garbage first: a
    dropped client's finalizer stops it)."""
    import gc
    import threading

    gc.collect()
    deadline = time.monotonic() + timeout
    while any(t.name == name for t in threading.enumerate()) \
            and time.monotonic() < deadline:
        time.sleep(0.02)
    return not any(t.name == name for t in threading.enumerate())


def test_a_dropped_client_stops_its_thread():
    with FakeCluster(nodes=(1,)) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        assert admin.cluster_id(5) == "fake-cluster"
        name = admin._io.name
        del admin
        assert thread_ends(name)


def test_a_dropped_client_whose_completed_futures_are_kept_stops_its_thread():
    """A helper that makes a short-lived client and returns its futures: once they are
    complete they do not keep the client (their done callback held it: one I/O thread
    and its connections per call, for as long as the results were kept)."""
    with FakeCluster(nodes=(1,)) as cluster:
        cluster.handle(ApiKey.CREATE_TOPICS, lambda node, req, v: created(req, v))
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        kept = admin.create_topics([NewTopic("t", 1)])
        assert kept["t"].result(10) is None
        name = admin._io.name
        del admin
        assert thread_ends(name)
        assert kept["t"].done()


def test_a_client_dropped_with_calls_running_lives_until_they_complete():
    """``AdminClient(conf).create_topics(...)`` without keeping the client: its futures
    keep it alive; once the last completes (on the I/O thread) it goes."""
    import gc
    import threading

    with FakeCluster(nodes=(1,)) as cluster:
        cluster.handle(ApiKey.CREATE_TOPICS, lambda node, req, v: created(req, v))
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        name = admin._io.name
        fut = admin.create_topics([NewTopic("t", 1)])["t"]
        del admin
        gc.collect()
        assert fut.result(10) is None
        del fut
        deadline = time.monotonic() + 5
        while any(t.name == name for t in threading.enumerate()) \
                and time.monotonic() < deadline:
            time.sleep(0.02)
            gc.collect()
        assert not any(t.name == name for t in threading.enumerate())


def test_cluster_id_is_asked_once_then_cached(admins):
    with FakeCluster(nodes=(1,)) as cluster:
        admin = admins(cluster)
        assert admin.cluster_id(5) == "fake-cluster"
        assert admin.cluster_id(5) == "fake-cluster"
        assert len(cluster.requests(ApiKey.METADATA)) == 1


def test_a_local_error_code_in_an_admin_answer_is_an_unknown_server_error():
    """Codes below -1 are the client's local ones (-191 is _PARTITION_EOF): a result entry
    carrying one is UNKNOWN_SERVER_ERROR, not a local event (kafka_client.errors.broker_code)."""
    from kafka_client.admin._operations import result_error
    from kafka_client.errors import KafkaError

    assert result_error(0, None) is None
    assert result_error(KafkaError._PARTITION_EOF, "x").code() == KafkaError.UNKNOWN_SERVER_ERROR
    assert result_error(KafkaError.TOPIC_ALREADY_EXISTS, None).code() == \
        KafkaError.TOPIC_ALREADY_EXISTS


def test_a_local_error_code_from_find_coordinator_or_metadata_is_an_unknown_server_error(
        admins):
    """The same for the answers every client reads: a FindCoordinator error of -195
    (_TRANSPORT, which the client would retry until the timeout) fails the call at once,
    and a topic's or partition's -191 in a Metadata answer is no _PARTITION_EOF."""
    from kafka_proto.messages import FindCoordinatorResponse

    with FakeCluster(nodes=(1,)) as cluster:
        cluster.topics = {"t": [1, 1]}

        def metadata(node, req, version):
            resp = cluster.metadata(node, req, version)
            for t in resp.topics:
                t.error_code = KafkaError._PARTITION_EOF
                for p in t.partitions:
                    p.error_code = KafkaError._PARTITION_EOF
            return resp

        cluster.handle(ApiKey.METADATA, metadata)
        cluster.handle(ApiKey.FIND_COORDINATOR, lambda node, req, v: FindCoordinatorResponse(
            coordinators=[FindCoordinatorResponse.Coordinator(
                key=k, node_id=-1, host="", port=-1, error_code=KafkaError._TRANSPORT)
                for k in req.coordinator_keys]))
        admin = admins(cluster)
        md = admin.list_topics("t", timeout=5)
        assert md.topics["t"].error.code() == KafkaError.UNKNOWN_SERVER_ERROR
        assert [p.error.code() for p in md.topics["t"].partitions.values()] == \
            [KafkaError.UNKNOWN_SERVER_ERROR] * 2
        started = time.monotonic()
        err = error_of(admin.delete_consumer_groups(["g"], request_timeout=5)["g"])
        assert err.code() == KafkaError.UNKNOWN_SERVER_ERROR
        assert time.monotonic() - started < 2
        assert len(cluster.requests(ApiKey.FIND_COORDINATOR)) == 1
