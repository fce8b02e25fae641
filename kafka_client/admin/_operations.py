"""The admin operations on the I/O thread: each builds its requests for the negotiated
version, sends them through :class:`~kafka_client._cluster.calls.CallRunner` to the
broker its API needs, and settles the application's futures from the answers.

Input was checked on the application thread (:mod:`kafka_client.admin._client`); what is
left here is what only the broker's answer (or its supported versions) can tell.
"""
from __future__ import annotations

import time
import uuid
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, cast

from kafka_client._cluster.calls import (
    ANY_BROKER,
    CONTROLLER,
    Broker,
    Call,
    CallError,
    CallRunner,
    Coordinator,
    PartitionKey,
    broker_error,
    group_by_topic,
)
from kafka_client._cluster.metadata import BrokerMetadata
from kafka_client._model import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    IsolationLevel,
    Node,
    TopicPartitionInfo,
    Uuid,
)
from kafka_client.admin._acl import AclBinding, AclBindingFilter, AclOperation, AclPermissionType
from kafka_client.admin._config import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource
from kafka_client.admin._groups import (
    ConsumerGroupDescription,
    ConsumerGroupListing,
    GroupMember,
    GroupMetadata,
    ListConsumerGroupsResult,
    MemberAssignment,
    MemberDescription,
    ShareGroupDescription,
    ShareMemberDescription,
)
from kafka_client.admin._resource import ResourcePatternType, ResourceType, enum_or_unknown
from kafka_client.admin._scram import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialsDescription,
)
from kafka_client.admin._topics import (
    DeletedRecords,
    DescribeClusterResult,
    ListOffsetsResultInfo,
    NewPartitions,
    NewTopic,
    TopicDescription,
)
from kafka_client.consumer.assignors import decode_assignment
from kafka_client.errors import KafkaError, KafkaException, broker_code, client_error
from kafka_client.types import (OFFSET_INVALID, TopicPartition, committed_metadata,
                                metadata_to_commit, topic_name_error)
from kafka_proto.enums import (
    ClassicGroupState, ConfigResourceType, ConsumerProtocolGroupState, CoordinatorType,
    GroupType, ListOffsetsTimestamp, ReplicaId,
)
from kafka_proto.errors import ErrorCode
from kafka_proto.messages import (
    AlterConfigsRequest,
    AlterShareGroupOffsetsRequest,
    AlterUserScramCredentialsRequest,
    ApiKey,
    ConsumerGroupDescribeRequest,
    CreateAclsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteAclsRequest,
    DeleteGroupsRequest,
    DeleteRecordsRequest,
    DeleteShareGroupOffsetsRequest,
    DeleteTopicsRequest,
    DescribeAclsRequest,
    DescribeClusterRequest,
    DescribeConfigsRequest,
    DescribeGroupsRequest,
    DescribeShareGroupOffsetsRequest,
    DescribeUserScramCredentialsRequest,
    ElectLeadersRequest,
    IncrementalAlterConfigsRequest,
    ListGroupsRequest,
    ListOffsetsRequest,
    MetadataRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    ShareGroupDescribeRequest,
)

__all__ = ["Options", "ScramUpsert", "settle"]

#: Broker errors retried for requests to the controller or a coordinator. (Not
#: REQUEST_TIMED_OUT: for CreateTopics and friends it means the operation timeout passed
#: while the broker carries on, which the application must hear about.)
_RETRIED = frozenset((ErrorCode.NOT_CONTROLLER, ErrorCode.NOT_COORDINATOR,
                      ErrorCode.COORDINATOR_NOT_AVAILABLE,
                      ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                      ErrorCode.UNSTABLE_OFFSET_COMMIT))

#: The "not asked for" value of the authorized-operations bit fields.
_NO_OPERATIONS = -(2 ** 31)

#: ConfigResource types on the DescribeConfigs / AlterConfigs wire (they differ from the
#: ACL resource types for groups).
_CONFIG_WIRE_TYPE = {ResourceType.TOPIC: ConfigResourceType.TOPIC,
                     ResourceType.BROKER: ConfigResourceType.BROKER,
                     ResourceType.GROUP: ConfigResourceType.GROUP}

#: Group states and types as the protocol spells them.
_GROUP_STATES = {
    ClassicGroupState.PREPARING_REBALANCE: ConsumerGroupState.PREPARING_REBALANCING,
    ClassicGroupState.COMPLETING_REBALANCE: ConsumerGroupState.COMPLETING_REBALANCING,
    ClassicGroupState.STABLE: ConsumerGroupState.STABLE,
    ClassicGroupState.DEAD: ConsumerGroupState.DEAD,
    ClassicGroupState.EMPTY: ConsumerGroupState.EMPTY,
}
_STATE_NAMES = {state: name for name, state in _GROUP_STATES.items()}
#: A KIP-848 group's states (ConsumerGroupDescribe; lower-cased, as they are matched), in
#: the classic names librdkafka reports them by: assigning and reconciling are its
#: rebalance.
_CONSUMER_GROUP_STATES = {name.lower(): state for name, state in (
    (ConsumerProtocolGroupState.EMPTY, ConsumerGroupState.EMPTY),
    (ConsumerProtocolGroupState.ASSIGNING, ConsumerGroupState.PREPARING_REBALANCING),
    (ConsumerProtocolGroupState.RECONCILING, ConsumerGroupState.COMPLETING_REBALANCING),
    (ConsumerProtocolGroupState.STABLE, ConsumerGroupState.STABLE),
    (ConsumerProtocolGroupState.DEAD, ConsumerGroupState.DEAD))}
_GROUP_TYPES = {GroupType.CLASSIC: ConsumerGroupType.CLASSIC,
                GroupType.CONSUMER: ConsumerGroupType.CONSUMER,
                GroupType.SHARE: ConsumerGroupType.SHARE}
_TYPE_NAMES = {t: name for name, t in _GROUP_TYPES.items()}


@dataclass
class Options:
    """The per-call options, checked and converted on the application thread."""

    deadline: float                      # monotonic: request_timeout from the call
    operation_timeout_ms: int = 0
    validate_only: bool = False
    broker: Optional[int] = None         # where to send non-broker config resources
    include_authorized_operations: bool = False
    require_stable: bool = False
    isolation_level: int = IsolationLevel.READ_UNCOMMITTED.value
    states: Optional[Set[ConsumerGroupState]] = None
    types: Optional[Set[ConsumerGroupType]] = None


# --------------------------------------------------------------------------- helpers


def reported(error: KafkaError) -> KafkaError:
    """An error as an admin result gives it to the application: not retriable. The call
    has retried what it would (the table's flag steered that); in a result a code such
    as UNKNOWN_TOPIC_OR_PART is final, and confluent-kafka's admin results carry no
    retriable flag (a ported ``if err.retriable(): retry`` loop would spin forever)."""
    if not error.retriable():
        return error
    return KafkaError(error.code(), error.str(), error.fatal(), False,
                      error.txn_requires_abort())


def entry_error(code: int, message: Optional[str]) -> Optional[KafkaError]:
    """The error of one entry of an admin result (see :func:`reported`)."""
    error = result_error(code, message)
    return None if error is None else reported(error)


def settle(future: Future, value: Any = None, error: Optional[KafkaError] = None) -> None:
    """Complete an application future once (later calls are ignored)."""
    if future.done():
        return
    try:
        if error is not None:
            future.set_exception(KafkaException(reported(error)))
        else:
            future.set_result(value)
    except InvalidStateError:  # completed meanwhile by close() on another thread
        pass


def fail_all(futures: Dict[Any, Future]) -> Callable[[KafkaError], None]:
    """An on_failure that fails every future still open."""
    def fail(error: KafkaError) -> None:
        for fut in futures.values():
            settle(fut, error=error)
    return fail


def result_error(code: int, message: Optional[str]) -> Optional[KafkaError]:
    """The error of one result entry: None for 0, else :func:`code_error`."""
    if not code:
        return None
    return code_error(code, message)


def code_error(code: int, message: Optional[str]) -> KafkaError:
    """The error of a code that is not 0 (``broker_code``: never one of the client's
    local codes) with the broker's message when it gave one."""
    code = broker_code(code)
    return client_error(code, message) if message else client_error(code)


def _unknown_node(node_id: int) -> Node:
    """A broker the metadata does not list (a replica on a broker that is down): its id
    only, host None and port 0, as librdkafka describes it."""
    return Node(node_id, None, 0)


def _node(runner: CallRunner, node_id: int) -> Optional[Node]:
    if node_id < 0:
        return None
    info = runner.cluster.metadata.brokers.get(node_id)
    if info is None:
        return _unknown_node(node_id)
    host, port, rack = info
    return Node(node_id, host, port, rack)


def _coordinator_node(runner: CallRunner, conn: Any) -> Node:
    """The group coordinator that answered on ``conn``: a broker FindCoordinator named
    (a broker id, so never None from :func:`_node`; an id below 0 is kept as unknown)."""
    return _node(runner, conn.node_id) or _unknown_node(conn.node_id)


def _operations(bits: int) -> Optional[List[AclOperation]]:
    """A KIP-430 authorized-operations bit field as AclOperation members."""
    if bits == _NO_OPERATIONS or bits is None:
        return None
    return [op for op in AclOperation if op.value < 32 and bits & (1 << op.value)]


def _uuid(value: Optional[uuid.UUID]) -> Uuid:
    """A topic id as confluent-kafka's Uuid: two signed 64-bit halves."""
    n = value.int if value is not None else 0
    return Uuid(_signed64(n >> 64), _signed64(n & ((1 << 64) - 1)))


def _signed64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _zero_count_error(t: NewTopic) -> Optional[KafkaError]:
    """Zero partitions or replicas: librdkafka lets them through to the broker, which
    refuses them (Kafka does; a lax broker might create an unusable topic)."""
    if t.num_partitions == 0:
        return client_error(ErrorCode.INVALID_PARTITIONS,
                          f"Invalid NewTopic({t.topic}): num_partitions must be at least 1")
    if t.replication_factor == 0:
        return client_error(ErrorCode.INVALID_REPLICATION_FACTOR,
                          f"Invalid NewTopic({t.topic}): replication_factor must be at least 1")
    return None


#: what a change's second sending answers when its first, lost with the connection, was
#: carried out: the error is kept (another client may have done it), and says so
_DONE_BEFORE = {
    ApiKey.CREATE_TOPICS: ErrorCode.TOPIC_ALREADY_EXISTS,
    ApiKey.DELETE_TOPICS: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ApiKey.CREATE_PARTITIONS: ErrorCode.INVALID_PARTITIONS,
    ApiKey.DELETE_GROUPS: ErrorCode.GROUP_ID_NOT_FOUND,
}


def _maybe_done_before(call: Call, code: int, error: Optional[KafkaError]
                       ) -> Optional[KafkaError]:
    """``error`` of a result of ``call``, noting when the call was sent again after a
    request lost with its connection and the code is what its own first sending, carried
    out by the broker, would make the second one answer."""
    if error is None or not call.lost or _DONE_BEFORE.get(call.api_key) != code:
        return error
    return KafkaError(error.code(), f"{error.str()} (the first {call.name} request was "
                      f"lost with its connection and sent again: it may have done this "
                      f"itself)", retriable=error.retriable())


def _settle_by_name(results: Sequence[Any], futures: Dict[str, Future],
                    pending: Dict[str, Any], key: str = "name",
                    call: Optional[Call] = None) -> Optional[KafkaError]:
    """Settle futures from per-topic (or per-user: ``key``) results (``name``,
    ``error_code``, maybe ``error_message``) of ``call``; keep those with a retried
    error pending and return one such error (None when nothing is left to retry)."""
    retry = None
    for r in results:
        name = getattr(r, key)
        if name not in pending:
            continue
        error = result_error(r.error_code, getattr(r, "error_message", None))
        if call is not None:
            error = _maybe_done_before(call, r.error_code, error)
        if r.error_code in _RETRIED:
            retry = error
            continue
        del pending[name]
        settle(futures[name], None, error)
    if retry is None:
        for name in list(pending):  # the broker left it out of an otherwise final answer
            del pending[name]
            settle(futures[name], error=client_error(
                KafkaError._BAD_MSG, f"the broker's answer has no result for {name!r}"))
    return retry


def _unsupported(what: str) -> CallError:
    return CallError(client_error(KafkaError._UNSUPPORTED_FEATURE, what))


# --------------------------------------------------------------------------- topics


def config_text(value: Any) -> Optional[str]:
    """A configuration value as sent: any value as its ``str()`` (``{"retention.ms":
    86400000}``), as confluent-kafka converts it; None stays null."""
    return value if value is None or isinstance(value, str) else str(value)


def create_topics(runner: CallRunner, topics: List[NewTopic], futures: Dict[str, Future],
                  opts: Options) -> None:
    pending: Dict[str, NewTopic] = {}
    for t in topics:
        err = topic_name_error(t.topic) or _zero_count_error(t)
        if err is not None:
            settle(futures[t.topic], error=err)
        else:
            pending[t.topic] = t
    if not pending:
        return

    def build(version: int) -> Any:
        if opts.validate_only and version < 1:
            raise _unsupported("validate_only needs CreateTopics v1 or later")
        if version < 4:
            # An older broker takes -1 for an invalid count (INVALID_PARTITIONS): the
            # broker's defaults can only be asked for from v4 on.
            defaulted = [t for t in pending.values() if not t.replica_assignment and
                         (t.num_partitions == -1 or t.replication_factor == -1)]
            for t in defaulted:
                what = ("partition count" if t.num_partitions == -1
                        else "replication factor")
                settle(futures[t.topic], error=client_error(
                    KafkaError._UNSUPPORTED_FEATURE,
                    f"the broker's default {what} (KIP-464) needs CreateTopics v4 or later "
                    f"(Apache Kafka 2.4); the controller has v{version}"))
                del pending[t.topic]
            if not pending:     # each future failed already: this error reaches none
                raise _unsupported("CreateTopics: no topic left to create")
        return CreateTopicsRequest(
            # With replica assignments the broker wants -1 for both counts (Kafka's
            # controller refuses the request otherwise, INVALID_REQUEST), as librdkafka
            # sends; confluent-kafka makes the application give the partition count.
            topics=[CreateTopicsRequest.CreatableTopic(
                name=t.topic,
                num_partitions=-1 if t.replica_assignment else t.num_partitions,
                replication_factor=-1 if t.replica_assignment else t.replication_factor,
                assignments=[CreateTopicsRequest.CreatableReplicaAssignment(
                    partition_index=i, broker_ids=list(ids))
                    for i, ids in enumerate(t.replica_assignment or ())],
                configs=[CreateTopicsRequest.CreatableTopicConfig(name=k, value=config_text(v))
                         for k, v in (t.config or {}).items()])
                for t in pending.values()],
            timeout_ms=opts.operation_timeout_ms, validate_only=opts.validate_only)

    def on_response(resp: Any, conn: Any) -> Optional[KafkaError]:
        return _settle_by_name(resp.topics, futures, pending, call=call)

    call = Call("CreateTopics", ApiKey.CREATE_TOPICS, CONTROLLER, opts.deadline, build,
                on_response, fail_all(futures))
    runner.submit(call)


def delete_topics(runner: CallRunner, topics: List[str], futures: Dict[str, Future],
                  opts: Options) -> None:
    pending = dict.fromkeys(topics)

    def build(version: int) -> Any:
        if version >= 6:
            return DeleteTopicsRequest(
                topics=[DeleteTopicsRequest.DeleteTopicState(name=t) for t in pending],
                timeout_ms=opts.operation_timeout_ms)
        return DeleteTopicsRequest(topic_names=list(pending),
                                   timeout_ms=opts.operation_timeout_ms)

    def on_response(resp: Any, conn: Any) -> Optional[KafkaError]:
        return _settle_by_name(resp.responses, futures, pending, call=call)

    call = Call("DeleteTopics", ApiKey.DELETE_TOPICS, CONTROLLER, opts.deadline, build,
                on_response, fail_all(futures))
    runner.submit(call)


def create_partitions(runner: CallRunner, new_parts: List[NewPartitions],
                      futures: Dict[str, Future], opts: Options) -> None:
    pending = {p.topic: p for p in new_parts}

    def build(version: int) -> Any:
        return CreatePartitionsRequest(
            topics=[CreatePartitionsRequest.CreatePartitionsTopic(
                name=p.topic, count=p.new_total_count,
                assignments=None if p.replica_assignment is None else [
                    CreatePartitionsRequest.CreatePartitionsAssignment(broker_ids=list(ids))
                    for ids in p.replica_assignment])
                for p in pending.values()],
            timeout_ms=opts.operation_timeout_ms, validate_only=opts.validate_only)

    def on_response(resp: Any, conn: Any) -> Optional[KafkaError]:
        return _settle_by_name(resp.results, futures, pending, call=call)

    call = Call("CreatePartitions", ApiKey.CREATE_PARTITIONS, CONTROLLER, opts.deadline,
                build, on_response, fail_all(futures))
    runner.submit(call)


def describe_topics(runner: CallRunner, topics: List[str], futures: Dict[str, Future],
                    opts: Options) -> None:
    def build(version: int) -> Any:
        if opts.include_authorized_operations and version < 8:
            raise _unsupported("include_authorized_operations needs Metadata v8 or later")
        req = MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
            include_topic_authorized_operations=opts.include_authorized_operations)
        if version >= 4:    # before v4 the broker's auto.create.topics.enable decides
            req.allow_auto_topic_creation = False
        return req

    def on_response(resp: Any, conn: Any) -> Optional[KafkaError]:
        nodes = {b.node_id: Node(b.node_id, b.host, b.port, getattr(b, "rack", None))
                 for b in resp.brokers or ()}

        def node(node_id: int) -> Node:
            return nodes.get(node_id) or _unknown_node(node_id)

        for t in resp.topics or ():
            fut = futures.get(t.name)
            if fut is None:
                continue
            if t.error_code:
                settle(fut, error=result_error(t.error_code, None))
                continue
            parts = [TopicPartitionInfo(p.partition_index,
                                        node(p.leader_id) if p.leader_id >= 0 else None,
                                        [node(r) for r in p.replica_nodes or ()],
                                        [node(r) for r in p.isr_nodes or ()])
                     for p in sorted(t.partitions or (), key=lambda p: p.partition_index)]
            settle(fut, TopicDescription(
                t.name, _uuid(getattr(t, "topic_id", None)), bool(getattr(t, "is_internal",
                                                                         False)), parts,
                _operations(getattr(t, "topic_authorized_operations", _NO_OPERATIONS))
                if opts.include_authorized_operations else None))
        for name, fut in futures.items():
            settle(fut, error=client_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                         f"the broker's answer does not mention {name!r}"))
        return None

    runner.submit(Call("DescribeTopics", ApiKey.METADATA, ANY_BROKER, opts.deadline, build,
                       on_response, fail_all(futures), min_version=1))


def describe_cluster(runner: CallRunner, future: Future, opts: Options) -> None:
    def result(cluster_id: Optional[str], controller: int, brokers: List[Node],
               operations: int) -> DescribeClusterResult:
        by_id = {n.id: n for n in brokers}
        return DescribeClusterResult(
            by_id.get(controller) if controller >= 0 else None, brokers, cluster_id,
            _operations(operations) if opts.include_authorized_operations else None)

    def on_describe(resp: Any, conn: Any) -> Optional[KafkaError]:
        if resp.error_code in _RETRIED:     # NOT_CONTROLLER and kin: asked again, as Java
            return result_error(resp.error_code, resp.error_message)
        if resp.error_code:
            settle(future, error=result_error(resp.error_code, resp.error_message))
            return None
        settle(future, result(resp.cluster_id, resp.controller_id,
                              [Node(b.broker_id, b.host, b.port, b.rack) for b in resp.brokers],
                              resp.cluster_authorized_operations))
        return None

    def with_metadata(error: KafkaError) -> None:
        """Brokers without DescribeCluster (KIP-700): ask Metadata, as librdkafka does."""
        if error.code() != KafkaError._UNSUPPORTED_FEATURE:
            settle(future, error=error)
            return

        def build(version: int) -> Any:
            if opts.include_authorized_operations and not 8 <= version <= 10:
                raise _unsupported("include_authorized_operations needs DescribeCluster or "
                                   "Metadata v8-v10")
            # no topics (v0 has no way to say so: an empty list is all of them there)
            req = MetadataRequest(topics=[], include_cluster_authorized_operations=(
                opts.include_authorized_operations))
            if version >= 4:
                req.allow_auto_topic_creation = False
            return req

        def on_metadata(resp: Any, conn: Any) -> Optional[KafkaError]:
            settle(future, result(
                getattr(resp, "cluster_id", None), getattr(resp, "controller_id", -1),
                [Node(b.node_id, b.host, b.port, getattr(b, "rack", None))
                 for b in resp.brokers], getattr(resp, "cluster_authorized_operations",
                                                 _NO_OPERATIONS)))
            return None

        # Metadata v11 dropped the cluster's authorized operations: v10 at most, as
        # librdkafka asks (the newest version made include_authorized_operations fail).
        runner.submit(Call("DescribeCluster", ApiKey.METADATA, ANY_BROKER, opts.deadline,
                           build, on_metadata, lambda e: settle(future, error=e),
                           min_version=1, max_version=10))

    runner.submit(Call("DescribeCluster", ApiKey.DESCRIBE_CLUSTER, ANY_BROKER, opts.deadline,
                       lambda version: DescribeClusterRequest(
                           include_cluster_authorized_operations=(
                               opts.include_authorized_operations)),
                       on_describe, with_metadata))


# --------------------------------------------------------------------------- configs


def _config_target(resource: ConfigResource, opts: Options) -> Any:
    if resource.restype == ResourceType.BROKER:
        return Broker(int(resource.name))
    if opts.broker is not None:
        return Broker(opts.broker)
    return ANY_BROKER


def _by_target(resources: List[ConfigResource], futures: Dict[ConfigResource, Future],
               opts: Options) -> Dict[Any, List[ConfigResource]]:
    """Resources grouped by the broker they must go to; resources no broker can take fail
    their future here."""
    groups: Dict[Any, List[ConfigResource]] = {}
    for res in resources:
        if res.restype not in _CONFIG_WIRE_TYPE:
            settle(futures[res], error=client_error(
                KafkaError._INVALID_ARG, f"{res.restype} resources have no configuration"))
            continue
        if res.restype == ResourceType.BROKER:
            try:
                if not -2 ** 31 <= int(res.name) < 2 ** 31:
                    raise ValueError
            except ValueError:
                settle(futures[res], error=client_error(
                    KafkaError._INVALID_ARG, f"Expected an int32 broker_id for "
                    f"ConfigResource(type=BROKER, name={res.name})"))
                continue
        groups.setdefault(_config_target(res, opts), []).append(res)
    return groups


def _wire_key(res: ConfigResource) -> Tuple[int, str]:
    return (_CONFIG_WIRE_TYPE[res.restype], res.name)


def _config_entry(c: Any, version: int) -> ConfigEntry:
    # The broker's number as the source, not the ConfigSource member: confluent-kafka's
    # described entries carry the int (``entry.source == ConfigSource.X.value``,
    # ``ConfigSource(entry.source)``).
    if version == 0:
        source = (ConfigSource.DEFAULT_CONFIG if c.is_default
                  else ConfigSource.UNKNOWN_CONFIG).value
    else:
        source = c.config_source
    synonyms = {}
    for s in getattr(c, "synonyms", None) or ():
        synonyms[s.name] = ConfigEntry(s.name, s.value, s.source, is_synonym=True)
    return ConfigEntry(c.name, c.value, source, is_read_only=c.read_only,
                       is_default=source == ConfigSource.DEFAULT_CONFIG.value,
                       is_sensitive=c.is_sensitive, synonyms=synonyms)


def describe_configs(runner: CallRunner, resources: List[ConfigResource],
                     futures: Dict[ConfigResource, Future], opts: Options) -> None:
    for target, group in _by_target(resources, futures, opts).items():
        _describe_configs(runner, target, group, futures, opts)


def _describe_configs(runner: CallRunner, target: Any, group: List[ConfigResource],
                      futures: Dict[ConfigResource, Future], opts: Options) -> None:
    by_key = {_wire_key(r): r for r in group}

    def build(version: int) -> Any:
        return DescribeConfigsRequest(
            resources=[DescribeConfigsRequest.DescribeConfigsResource(
                resource_type=key[0], resource_name=key[1], configuration_keys=None)
                for key in by_key],
            include_synonyms=version >= 1)

    def on_response(resp: Any, conn: Any) -> Optional[KafkaError]:
        version = conn.version_for(ApiKey.DESCRIBE_CONFIGS)
        for r in resp.results:
            res = by_key.get((r.resource_type, r.resource_name))
            if res is None:
                continue
            err = result_error(r.error_code, r.error_message)
            settle(futures[res], None if err else {
                c.name: _config_entry(c, version) for c in r.configs or ()}, err)
        for res in group:
            settle(futures[res], error=client_error(
                KafkaError._BAD_MSG, f"the broker's answer has no result for {res}"))
        return None

    runner.submit(Call("DescribeConfigs", ApiKey.DESCRIBE_CONFIGS, target, opts.deadline,
                       build, on_response, fail_all({r: futures[r] for r in group})))


def alter_configs(runner: CallRunner, resources: List[ConfigResource],
                  futures: Dict[ConfigResource, Future], opts: Options) -> None:
    for target, group in _by_target(resources, futures, opts).items():
        def build(version: int, group: List[ConfigResource] = group) -> Any:
            return AlterConfigsRequest(
                resources=[AlterConfigsRequest.AlterConfigsResource(
                    resource_type=_CONFIG_WIRE_TYPE[r.restype], resource_name=r.name,
                    configs=[AlterConfigsRequest.AlterableConfig(name=k, value=config_text(v))
                             for k, v in r.set_config_dict.items()])
                    for r in group],
                validate_only=opts.validate_only)

        _alter(runner, "AlterConfigs", ApiKey.ALTER_CONFIGS, target, group, build, futures,
               opts)


def incremental_alter_configs(runner: CallRunner, resources: List[ConfigResource],
                              futures: Dict[ConfigResource, Future], opts: Options) -> None:
    for target, group in _by_target(resources, futures, opts).items():
        def build(version: int, group: List[ConfigResource] = group) -> Any:
            return IncrementalAlterConfigsRequest(
                resources=[IncrementalAlterConfigsRequest.AlterConfigsResource(
                    resource_type=_CONFIG_WIRE_TYPE[r.restype], resource_name=r.name,
                    configs=[IncrementalAlterConfigsRequest.AlterableConfig(
                        # AdminClient.incremental_alter_configs() checked it is given
                        name=e.name, config_operation=cast(AlterConfigOpType,
                                                           e.incremental_operation).value,
                        value=None if e.incremental_operation == AlterConfigOpType.DELETE
                        else e.value)
                        for e in r.incremental_configs])
                    for r in group],
                validate_only=opts.validate_only)

        _alter(runner, "IncrementalAlterConfigs", ApiKey.INCREMENTAL_ALTER_CONFIGS, target,
               group, build, futures, opts)


def _alter(runner: CallRunner, name: str, api_key: ApiKey, target: Any,
           group: List[ConfigResource], build: Callable[[int], Any],
           futures: Dict[ConfigResource, Future], opts: Options) -> None:
    by_key = {_wire_key(r): r for r in group}
    own = {r: futures[r] for r in group}

    def on_response(resp: Any, conn: Any) -> Optional[KafkaError]:
        for r in resp.responses:
            res = by_key.get((r.resource_type, r.resource_name))
            if res is not None:
                settle(own[res], None, result_error(r.error_code, r.error_message))
        fail_all(own)(client_error(KafkaError._BAD_MSG, "the broker's answer has no result "
                                 "for this resource"))
        return None

    runner.submit(Call(name, api_key, target, opts.deadline, build, on_response,
                       fail_all(own)))


# --------------------------------------------------------------------------- partitions


def delete_records(runner: CallRunner, offsets: Dict[PartitionKey, int],
                   futures: Dict[PartitionKey, Future], opts: Options) -> None:
    def build(version: int, keys: List[PartitionKey]) -> Any:
        return DeleteRecordsRequest(
            topics=[DeleteRecordsRequest.DeleteRecordsTopic(
                name=topic, partitions=[DeleteRecordsRequest.DeleteRecordsPartition(
                    partition_index=p, offset=offsets[(topic, p)]) for p in parts])
                for topic, parts in group_by_topic(keys).items()],
            timeout_ms=opts.operation_timeout_ms)

    def parse(resp: Any) -> Dict[PartitionKey, Tuple[int, Any]]:
        return {(t.name, p.partition_index): (p.error_code, DeletedRecords(p.low_watermark))
                for t in resp.topics for p in t.partitions}

    runner.submit_to_leaders("DeleteRecords", ApiKey.DELETE_RECORDS, offsets, opts.deadline,
                             build, parse, _settle_key(futures))


def _settle_key(futures: Dict[Any, Future]) -> Callable[[Any, Any, Optional[KafkaError]],
                                                         None]:
    def finish(key: Any, result: Any, error: Optional[KafkaError]) -> None:
        settle(futures[key], None if error else result, error)
    return finish


def list_offsets(runner: CallRunner, specs: Dict[PartitionKey, int],
                 futures: Dict[PartitionKey, Future], opts: Options) -> None:
    # MAX_TIMESTAMP exists from ListOffsets v7 (KIP-734); read_committed from v2.
    min_version = (7 if ListOffsetsTimestamp.MAX_TIMESTAMP in specs.values()
                   else 2 if opts.isolation_level != IsolationLevel.READ_UNCOMMITTED.value else 0)

    def build(version: int, keys: List[PartitionKey]) -> Any:
        return ListOffsetsRequest(
            replica_id=ReplicaId.CONSUMER, isolation_level=opts.isolation_level,
            topics=[ListOffsetsRequest.ListOffsetsTopic(
                name=topic, partitions=[ListOffsetsRequest.ListOffsetsPartition(
                    partition_index=p, current_leader_epoch=-1, timestamp=specs[(topic, p)],
                    max_num_offsets=1) for p in parts])
                for topic, parts in group_by_topic(keys).items()],
            # v10: how long the broker may take reading tiered storage; the time left
            timeout_ms=max(0, int((opts.deadline - time.monotonic()) * 1000)))

    def parse(resp: Any) -> Dict[PartitionKey, Tuple[int, Any]]:
        out = {}
        for t in resp.topics:
            for p in t.partitions:
                if p.old_style_offsets:  # v0
                    info = ListOffsetsResultInfo(p.old_style_offsets[0], -1, -1)
                else:
                    info = ListOffsetsResultInfo(p.offset, p.timestamp, p.leader_epoch)
                out[(t.name, p.partition_index)] = (p.error_code, info)
        return out

    runner.submit_to_leaders("ListOffsets", ApiKey.LIST_OFFSETS, specs, opts.deadline, build,
                             parse, _settle_key(futures), min_version=min_version)


# --------------------------------------------------------------------------- groups


def list_consumer_groups(runner: CallRunner, future: Future, opts: Options) -> None:
    valid: List[ConsumerGroupListing] = []
    errors: List[KafkaError] = []
    seen: Set[str] = set()
    min_version = 5 if opts.types else (4 if opts.states else 0)
    # A share group is listed only when asked for by type (as Kafka's listGroups() with
    # the share type): it is no consumer group.
    protocol_types = ("", "consumer") + (
        (GroupType.SHARE,) if ConsumerGroupType.SHARE in (opts.types or ()) else ())

    def listed(resp: Any, conn: Any) -> Optional[KafkaError]:
        if resp.error_code:
            err = code_error(resp.error_code, None)
            if resp.error_code in _RETRIED:
                return err
            errors.append(reported(err))
            return None
        for g in resp.groups:
            if g.protocol_type not in protocol_types or g.group_id in seen:
                continue
            seen.add(g.group_id)
            valid.append(ConsumerGroupListing(
                g.group_id, g.protocol_type == "",
                _GROUP_STATES.get(getattr(g, "group_state", ""), ConsumerGroupState.UNKNOWN),
                _GROUP_TYPES.get(getattr(g, "group_type", ""), ConsumerGroupType.UNKNOWN)))
        return None

    def build(version: int) -> Any:
        return ListGroupsRequest(
            states_filter=[_STATE_NAMES[s] for s in opts.states or () if s in _STATE_NAMES],
            types_filter=[_TYPE_NAMES[t] for t in opts.types or () if t in _TYPE_NAMES])

    def ask(node_id: int, one_done: Callable[[], None]) -> None:
        def on_response(resp: Any, conn: Any) -> Optional[KafkaError]:
            again = listed(resp, conn)
            if again is None:
                one_done()
            return again

        def on_failure(error: KafkaError) -> None:
            errors.append(reported(error))
            one_done()

        runner.submit(Call("ListGroups", ApiKey.LIST_GROUPS, Broker(node_id), opts.deadline,
                           build, on_response, on_failure, min_version=min_version))

    _each_broker(runner, opts, lambda e: settle(future, error=e), ask,
                 lambda: settle(future, ListConsumerGroupsResult(valid, errors)))


def _each_broker(runner: CallRunner, opts: Options, fail: Callable[[KafkaError], None],
                 ask: Callable[[int, Callable[[], None]], None],
                 done: Callable[[], None]) -> None:
    """Learn the brokers (a Metadata request), then ``ask(node_id, one_done)`` each of
    them; ``done()`` once every one called ``one_done``. ``fail(error)`` when the
    brokers cannot be learnt."""
    def every_broker(error: Optional[KafkaError]) -> None:
        if error is not None:
            fail(error)
            return
        # The brokers the answer just waited for lists: one the cluster no longer names
        # (stopped, removed) is not asked.
        md = runner.cluster.metadata
        nodes = list(md.listed_brokers) or sorted(md.brokers)
        left = [len(nodes)]

        def one_done() -> None:
            left[0] -= 1
            if left[0] == 0:
                done()

        for node_id in nodes:
            ask(node_id, one_done)
        if not nodes:
            done()

    runner.refresh_metadata(every_broker, opts.deadline)


def list_groups(runner: CallRunner, group: Optional[str], future: Future,
                opts: Options) -> None:
    """The legacy listing: ListGroups on every broker, then DescribeGroups on that
    broker (the groups' coordinator) for the groups it listed (``group`` only, when
    given). The future's result is a list of GroupMetadata; it fails with the first
    broker's error when some broker could not be asked (_PARTIAL if others could)."""
    found: List[GroupMetadata] = []
    errors: List[KafkaError] = []
    asked = [0]

    def ask(node_id: int, one_done: Callable[[], None]) -> None:
        def on_listed(resp: Any, conn: Any) -> Optional[KafkaError]:
            if resp.error_code in _RETRIED:
                return result_error(resp.error_code, None)
            if resp.error_code:
                errors.append(broker_error(resp.error_code, None,
                                           f"ListGroups to broker {node_id}"))
                one_done()
                return None
            asked[0] += 1
            ids = [g.group_id for g in resp.groups if group is None or g.group_id == group]
            if ids:
                _describe_groups(runner, node_id, ids, found, errors, opts, one_done)
            else:
                one_done()
            return None

        def on_failure(error: KafkaError) -> None:
            errors.append(error)
            one_done()

        runner.submit(Call("ListGroups", ApiKey.LIST_GROUPS, Broker(node_id), opts.deadline,
                           lambda version: ListGroupsRequest(), on_listed, on_failure))

    def done() -> None:
        if errors:
            first = errors[0]
            settle(future, error=first if not asked[0] else client_error(
                KafkaError._PARTIAL, f"{len(errors)} broker(s) could not be asked: "
                f"{first.str()}"))
        else:
            settle(future, found)

    _each_broker(runner, opts, lambda e: settle(future, error=e), ask, done)


def _describe_groups(runner: CallRunner, node_id: int, group_ids: List[str],
                     found: List[GroupMetadata], errors: List[KafkaError], opts: Options,
                     done: Callable[[], None]) -> None:
    """DescribeGroups of ``group_ids`` on the broker that listed them, as GroupMetadata
    appended to ``found``."""
    def on_response(resp: Any, conn: Any) -> Optional[KafkaError]:
        host, port, _rack = runner.cluster.metadata.brokers.get(node_id, (conn.host,
                                                                          conn.port, None))
        for g in resp.groups:
            if g.error_code in _RETRIED:
                return result_error(g.error_code, None)
        for g in resp.groups:
            meta = GroupMetadata()
            meta.broker = BrokerMetadata(node_id, host, port)
            meta.id = g.group_id
            meta.error = entry_error(g.error_code, None)
            meta.state = g.group_state
            meta.protocol_type = g.protocol_type
            meta.protocol = g.protocol_data
            for m in g.members:
                member = GroupMember()
                member.id = m.member_id
                member.client_id = m.client_id
                member.client_host = m.client_host
                member.metadata = bytes(m.member_metadata)
                member.assignment = bytes(m.member_assignment)
                meta.members.append(member)
            found.append(meta)
        done()
        return None

    def on_failure(error: KafkaError) -> None:
        errors.append(error)
        done()

    runner.submit(Call("DescribeGroups", ApiKey.DESCRIBE_GROUPS, Broker(node_id),
                       opts.deadline, lambda version: DescribeGroupsRequest(groups=group_ids),
                       on_response, on_failure))


def _group_entry(groups: Any, group_id: str, missing: str) -> Any:
    """``group_id``'s entry of an answer's ``groups``, or the retriable error the call is
    tried again with (coordinator moved or loading). Raises :class:`CallError`, which
    fails the call, when the answer has no entry for it (``missing`` says what it lacks)
    or the entry carries any other error."""
    g = next((g for g in groups if g.group_id == group_id), None)
    if g is None:
        raise CallError(client_error(KafkaError._BAD_MSG, f"the broker's answer {missing} "
                                                          f"group {group_id!r}"))
    if g.error_code in _RETRIED:
        return code_error(g.error_code, None)
    if g.error_code:
        # DescribeGroups' entries carry no message
        raise CallError(code_error(g.error_code, getattr(g, "error_message", None)))
    return g


def _group_call(runner: CallRunner, name: str, api_key: ApiKey, group_id: str,
                opts: Options, build: Callable[[int], Any],
                on_response: Callable[[Any, Any], Optional[KafkaError]], future: Future,
                **kw: Any) -> Call:
    call = Call(name, api_key, Coordinator(CoordinatorType.GROUP, group_id), opts.deadline,
                build, on_response, lambda error: settle(future, error=error), **kw)
    runner.submit(call)
    return call


def describe_consumer_groups(runner: CallRunner, group_ids: List[str],
                             futures: Dict[str, Future], opts: Options) -> None:
    for group_id in group_ids:
        _describe_group(runner, group_id, futures[group_id], opts)


def _describe_consumer_group(runner: CallRunner, group_id: str, future: Future,
                             opts: Options, classic: ConsumerGroupDescription) -> None:
    """A group DescribeGroups called Dead with no members (what Kafka 4 says of a KIP-848
    group, and of a group that does not exist), by ConsumerGroupDescribe; where the
    coordinator has no such API or no such group, the answer stays ``classic``."""
    def build(version: int) -> Any:
        return ConsumerGroupDescribeRequest(
            group_ids=[group_id],
            include_authorized_operations=opts.include_authorized_operations)

    def on_response(resp: Any, conn: Any) -> Optional[KafkaError]:
        g = next((g for g in resp.groups if g.group_id == group_id), None)
        if g is not None and g.error_code in _RETRIED:
            return result_error(g.error_code, None)
        # A group of this protocol has had a member, so its epoch is 1 or more (Tansu 0.6
        # answers for any group id, without an error and with epoch 0 or less).
        if g is None or g.error_code == ErrorCode.GROUP_ID_NOT_FOUND or (
                not g.error_code and g.group_epoch <= 0):
            settle(future, classic)
            return None
        if g.error_code:
            settle(future, error=result_error(g.error_code, g.error_message))
            return None

        def assignment(a: Any) -> MemberAssignment:
            return MemberAssignment([TopicPartition(t.topic_name, p)
                                     for t in (a.topic_partitions if a is not None else ())
                                     for p in t.partitions])

        members = [MemberDescription(m.member_id, m.client_id, m.client_host,
                                     assignment(m.assignment), m.instance_id,
                                     assignment(m.target_assignment)) for m in g.members]
        settle(future, ConsumerGroupDescription(
            group_id, False, members, g.assignor_name,
            _CONSUMER_GROUP_STATES.get(g.group_state.lower(), ConsumerGroupState.UNKNOWN),
            _coordinator_node(runner, conn),
            _operations(g.authorized_operations)
            if opts.include_authorized_operations else None,
            ConsumerGroupType.CONSUMER))
        return None

    def on_failure(error: KafkaError) -> None:
        settle(future, classic) if error.code() == KafkaError._UNSUPPORTED_FEATURE \
            else settle(future, error=error)

    runner.submit(Call("ConsumerGroupDescribe", ApiKey.CONSUMER_GROUP_DESCRIBE,
                       Coordinator(CoordinatorType.GROUP, group_id), opts.deadline, build,
                       on_response, on_failure))


def _describe_group(runner: CallRunner, group_id: str, future: Future, opts: Options) -> None:
    def build(version: int) -> Any:
        if opts.include_authorized_operations and version < 3:
            raise _unsupported("include_authorized_operations needs DescribeGroups v3 or "
                               "later")
        return DescribeGroupsRequest(
            groups=[group_id],
            include_authorized_operations=opts.include_authorized_operations)

    def on_response(resp: Any, conn: Any) -> Optional[KafkaError]:
        g = _group_entry(resp.groups, group_id, "does not describe")
        if isinstance(g, KafkaError):
            return g
        consumer = g.protocol_type == "consumer"
        members = []
        for m in g.members:
            assignment: List[TopicPartition] = []
            if consumer and m.member_assignment:
                try:
                    assignment = [TopicPartition(t, p) for t, p in
                                  decode_assignment(m.member_assignment).partitions]
                except Exception:  # another client's blob we cannot read: no assignment
                    assignment = []
            members.append(MemberDescription(
                m.member_id, m.client_id, m.client_host, MemberAssignment(assignment),
                getattr(m, "group_instance_id", None)))
        described = ConsumerGroupDescription(
            group_id, g.protocol_type == "", members, g.protocol_data,
            _GROUP_STATES.get(g.group_state, ConsumerGroupState.UNKNOWN),
            _coordinator_node(runner, conn),
            _operations(getattr(g, "authorized_operations", _NO_OPERATIONS))
            if opts.include_authorized_operations else None,
            ConsumerGroupType.CLASSIC)
        if described.state == ConsumerGroupState.DEAD and not members \
                and not g.protocol_type:
            _describe_consumer_group(runner, group_id, future, opts, described)
        else:
            settle(future, described)
        return None

    _group_call(runner, "DescribeGroups", ApiKey.DESCRIBE_GROUPS, group_id, opts, build,
                on_response, future)


def delete_consumer_groups(runner: CallRunner, group_ids: List[str],
                           futures: Dict[str, Future], opts: Options) -> None:
    for group_id in group_ids:
        future = futures[group_id]
        sent: List[Call] = []

        def on_response(resp: Any, conn: Any, group_id: str = group_id,
                        future: Future = future,
                        sent: List[Call] = sent) -> Optional[KafkaError]:
            r = next((r for r in resp.results if r.group_id == group_id), None)
            if r is None:
                settle(future, None, client_error(KafkaError._BAD_MSG,
                                                  "no result for the group"))
                return None
            code = r.error_code
            if code in _RETRIED:
                return result_error(code, None)
            settle(future, None, _maybe_done_before(sent[0], code, result_error(code, None)))
            return None

        def build(version: int, group_id: str = group_id) -> Any:
            return DeleteGroupsRequest(groups_names=[group_id])

        sent.append(_group_call(runner, "DeleteGroups", ApiKey.DELETE_GROUPS, group_id, opts,
                                build, on_response, future))


def list_consumer_group_offsets(runner: CallRunner, request: ConsumerGroupTopicPartitions,
                                future: Future, opts: Options) -> None:
    group_id = request.group_id
    asked = None if request.topic_partitions is None else [
        (tp.topic, tp.partition) for tp in request.topic_partitions]

    def build(version: int) -> Any:
        if opts.require_stable and version < 7:
            raise _unsupported("require_stable needs OffsetFetch v7 or later")
        if asked is None and version < 2:
            # v0-1 have no null topics ("all of them"): name the partitions there
            raise _unsupported("all of a group's committed offsets need OffsetFetch v2 "
                               "(Kafka 0.10.2) or later; name the partitions")
        if version >= 8:  # KIP-709: groups in a list (Tansu answers "all topics" only so)
            return OffsetFetchRequest(
                groups=[OffsetFetchRequest.OffsetFetchRequestGroup(
                    group_id=group_id, topics=None if asked is None else [
                        OffsetFetchRequest.OffsetFetchRequestTopics(name=t,
                                                                    partition_indexes=ps)
                        for t, ps in group_by_topic(asked).items()])],
                require_stable=opts.require_stable)
        return OffsetFetchRequest(
            group_id=group_id,
            topics=None if asked is None else [
                OffsetFetchRequest.OffsetFetchRequestTopic(name=t, partition_indexes=ps)
                for t, ps in group_by_topic(asked).items()],
            require_stable=opts.require_stable)

    def on_response(resp: Any, conn: Any) -> Optional[KafkaError]:
        if resp.groups:  # v8+
            answer = next((g for g in resp.groups if g.group_id == group_id), None)
            if answer is None:
                settle(future, error=client_error(KafkaError._BAD_MSG,
                                                f"the broker's answer has no offsets for "
                                                f"group {group_id!r}"))
                return None
            code, topics = answer.error_code, answer.topics
        else:
            code, topics = getattr(resp, "error_code", 0), resp.topics
        if code in _RETRIED:
            return result_error(code, None)
        if code:
            settle(future, error=result_error(code, None))
            return None
        got: Dict[PartitionKey, TopicPartition] = {}
        for t in topics:
            for p in t.partitions:
                if p.error_code in _RETRIED:
                    return result_error(p.error_code, None)
                offset = p.committed_offset if p.committed_offset >= 0 else OFFSET_INVALID
                tp = TopicPartition(t.name, p.partition_index, offset,
                                    committed_metadata(p.metadata),
                                    getattr(p, "committed_leader_epoch", -1))
                got[(t.name, p.partition_index)] = tp._set_error(
                    entry_error(p.error_code, None))
        # Sorted by topic and partition, whatever the order asked, as librdkafka's list.
        if asked is None:
            parts = sorted(got.values())
        else:
            parts = sorted(got.get(k) or TopicPartition(k[0], k[1], OFFSET_INVALID)
                           for k in asked)
        settle(future, ConsumerGroupTopicPartitions(group_id, parts))
        return None

    _group_call(runner, "OffsetFetch", ApiKey.OFFSET_FETCH, group_id, opts, build,
                on_response, future)


def alter_consumer_group_offsets(runner: CallRunner, request: ConsumerGroupTopicPartitions,
                                 future: Future, opts: Options) -> None:
    group_id = request.group_id
    parts: List[TopicPartition] = list(request.topic_partitions or ())

    def build(version: int) -> Any:
        by_topic: Dict[str, List[Any]] = {}
        for tp in parts:
            by_topic.setdefault(tp.topic, []).append(
                OffsetCommitRequest.OffsetCommitRequestPartition(
                    partition_index=tp.partition, committed_offset=tp.offset,
                    committed_leader_epoch=tp.leader_epoch if tp.leader_epoch is not None
                    and version >= 6 else -1,
                    commit_timestamp=-1,
                    committed_metadata=metadata_to_commit(tp.metadata) or ""))
        return OffsetCommitRequest(
            group_id=group_id, generation_id_or_member_epoch=-1, member_id="",
            group_instance_id=None, retention_time_ms=-1,
            topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=ps)
                    for t, ps in by_topic.items()])

    def on_response(resp: Any, conn: Any) -> Optional[KafkaError]:
        codes = {(t.name, p.partition_index): p.error_code
                 for t in resp.topics for p in t.partitions}
        for code in codes.values():
            if code in _RETRIED:
                return result_error(code, None)
        out = sorted(TopicPartition(tp.topic, tp.partition, tp.offset, tp.metadata,
                                    tp.leader_epoch)._set_error(
            entry_error(codes.get((tp.topic, tp.partition), 0), None)) for tp in parts)
        settle(future, ConsumerGroupTopicPartitions(group_id, out))
        return None

    _group_call(runner, "OffsetCommit", ApiKey.OFFSET_COMMIT, group_id, opts, build,
                on_response, future, max_version=9)


# --------------------------------------------------------------------------- share groups


def describe_share_groups(runner: CallRunner, group_ids: List[str],
                          futures: Dict[str, Future], opts: Options) -> None:
    """ShareGroupDescribe of each group to its coordinator (KIP-932)."""
    for group_id in group_ids:
        _describe_share_group(runner, group_id, futures[group_id], opts)


def _describe_share_group(runner: CallRunner, group_id: str, future: Future,
                          opts: Options) -> None:
    def build(version: int) -> Any:
        return ShareGroupDescribeRequest(
            group_ids=[group_id],
            include_authorized_operations=opts.include_authorized_operations)

    def on_response(resp: Any, conn: Any) -> Optional[KafkaError]:
        g = _group_entry(resp.groups, group_id, "does not describe")
        if isinstance(g, KafkaError):
            return g
        members = [ShareMemberDescription(
            m.member_id, m.client_id, m.client_host,
            MemberAssignment(sorted(TopicPartition(t.topic_name, p)
                                    for t in m.assignment.topic_partitions
                                    for p in t.partitions)
                             if m.assignment is not None else []),
            m.member_epoch, m.rack_id) for m in g.members]
        settle(future, ShareGroupDescription(
            group_id, members,
            _CONSUMER_GROUP_STATES.get(g.group_state.lower(), ConsumerGroupState.UNKNOWN),
            _coordinator_node(runner, conn), g.group_epoch, g.assignment_epoch, g.assignor_name,
            _operations(g.authorized_operations)
            if opts.include_authorized_operations else None))
        return None

    _group_call(runner, "ShareGroupDescribe", ApiKey.SHARE_GROUP_DESCRIBE, group_id, opts,
                build, on_response, future)


def list_share_group_offsets(runner: CallRunner,
                             requests: List[ConsumerGroupTopicPartitions],
                             futures: Dict[str, Future], opts: Options) -> None:
    """DescribeShareGroupOffsets of each group to its coordinator: the share-partitions'
    start offsets (all of the group's, or those named)."""
    for request in requests:
        _list_share_group_offsets(runner, request, futures[request.group_id], opts)


def _list_share_group_offsets(runner: CallRunner, request: ConsumerGroupTopicPartitions,
                              future: Future, opts: Options) -> None:
    group_id = request.group_id
    asked = None if request.topic_partitions is None else [
        (tp.topic, tp.partition) for tp in request.topic_partitions]
    R = DescribeShareGroupOffsetsRequest

    def build(version: int) -> Any:
        return R(groups=[R.DescribeShareGroupOffsetsRequestGroup(
            group_id=group_id, topics=None if asked is None else [
                R.DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps)
                for t, ps in group_by_topic(asked).items()])])

    def on_response(resp: Any, conn: Any) -> Optional[KafkaError]:
        g = _group_entry(resp.groups, group_id, "has no offsets for")
        if isinstance(g, KafkaError):
            return g
        got: Dict[PartitionKey, TopicPartition] = {}
        for t in g.topics:
            for p in t.partitions:
                if p.error_code in _RETRIED:
                    return result_error(p.error_code, None)
                # -1: a share-partition no member has read yet has no start offset
                got[(t.topic_name, p.partition_index)] = TopicPartition(
                    t.topic_name, p.partition_index,
                    p.start_offset if p.start_offset >= 0 else OFFSET_INVALID,
                    leader_epoch=p.leader_epoch if p.leader_epoch >= 0 else None
                )._set_error(entry_error(p.error_code, p.error_message))
        parts = sorted(got.values()) if asked is None else sorted(
            got.get(k) or TopicPartition(k[0], k[1], OFFSET_INVALID) for k in asked)
        settle(future, ConsumerGroupTopicPartitions(group_id, parts))
        return None

    _group_call(runner, "DescribeShareGroupOffsets", ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
                group_id, opts, build, on_response, future)


def alter_share_group_offsets(runner: CallRunner, request: ConsumerGroupTopicPartitions,
                              future: Future, opts: Options) -> None:
    """AlterShareGroupOffsets to the group's coordinator: set the share-partitions' start
    offsets of a group without members."""
    group_id = request.group_id
    parts: List[TopicPartition] = list(request.topic_partitions or ())
    R = AlterShareGroupOffsetsRequest

    def build(version: int) -> Any:
        by_topic: Dict[str, List[Any]] = {}
        for tp in parts:
            by_topic.setdefault(tp.topic, []).append(R.AlterShareGroupOffsetsRequestPartition(
                partition_index=tp.partition, start_offset=tp.offset))
        return R(group_id=group_id, topics=[
            R.AlterShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps)
            for t, ps in by_topic.items()])

    def on_response(resp: Any, conn: Any) -> Optional[KafkaError]:
        if resp.error_code in _RETRIED:
            return result_error(resp.error_code, None)
        if resp.error_code:
            settle(future, error=result_error(resp.error_code, resp.error_message))
            return None
        errors = {(t.topic_name, p.partition_index): (p.error_code, p.error_message)
                  for t in resp.responses for p in t.partitions}
        for code, _message in errors.values():
            if code in _RETRIED:
                return result_error(code, None)
        out = []
        for tp in parts:
            key = (tp.topic, tp.partition)
            error = entry_error(*errors[key]) if key in errors else client_error(
                KafkaError._BAD_MSG, "the broker's answer has no result for the partition")
            out.append(TopicPartition(tp.topic, tp.partition, tp.offset)._set_error(error))
        settle(future, ConsumerGroupTopicPartitions(group_id, sorted(out)))
        return None

    _group_call(runner, "AlterShareGroupOffsets", ApiKey.ALTER_SHARE_GROUP_OFFSETS, group_id,
                opts, build, on_response, future)


def delete_share_group_offsets(runner: CallRunner, group_id: str, topics: List[str],
                               futures: Dict[str, Future], opts: Options) -> None:
    """DeleteShareGroupOffsets to the group's coordinator: drop the share-partition state
    of ``topics`` for a group without members; a future per topic."""
    R = DeleteShareGroupOffsetsRequest

    def build(version: int) -> Any:
        return R(group_id=group_id,
                 topics=[R.DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in topics])

    def on_response(resp: Any, conn: Any) -> Optional[KafkaError]:
        if resp.error_code in _RETRIED:
            return result_error(resp.error_code, None)
        if resp.error_code:
            fail_all(futures)(code_error(resp.error_code, resp.error_message))
            return None
        answers = {r.topic_name: r for r in resp.responses}
        for r in answers.values():
            if r.error_code in _RETRIED:
                return result_error(r.error_code, None)
        for topic in topics:
            r = answers.get(topic)
            settle(futures[topic], None, client_error(
                KafkaError._BAD_MSG, "the broker's answer has no result for the topic")
                if r is None else entry_error(r.error_code, r.error_message))
        return None

    runner.submit(Call("DeleteShareGroupOffsets", ApiKey.DELETE_SHARE_GROUP_OFFSETS,
                       Coordinator(CoordinatorType.GROUP, group_id), opts.deadline, build,
                       on_response, fail_all(futures)))


# --------------------------------------------------------------------------- ACLs


def _binding(restype: int, name: str, pattern: int, principal: str, host: str,
             operation: int, permission: int) -> AclBinding:
    return AclBinding(enum_or_unknown(ResourceType, restype), name,
                      enum_or_unknown(ResourcePatternType, pattern), principal, host,
                      enum_or_unknown(AclOperation, operation),
                      enum_or_unknown(AclPermissionType, permission))


def _check_pattern(pattern: ResourcePatternType, version: int, filtering: bool) -> None:
    """Before v1 the protocol has no pattern type: every ACL is literal."""
    allowed = (ResourcePatternType.LITERAL, ResourcePatternType.ANY) if filtering else (
        ResourcePatternType.LITERAL,)
    if version < 1 and pattern not in allowed:
        raise _unsupported(f"{pattern} patterns need ACL API v1 or later (KIP-290)")


def create_acls(runner: CallRunner, acls: List[AclBinding], futures: Dict[AclBinding, Future],
                opts: Options) -> None:
    def build(version: int) -> Any:
        for a in acls:
            _check_pattern(a.resource_pattern_type, version, False)
        return CreateAclsRequest(creations=[CreateAclsRequest.AclCreation(
            resource_type=a.restype.value, resource_name=a.name,
            resource_pattern_type=a.resource_pattern_type.value, principal=a.principal,
            host=a.host, operation=a.operation.value,
            permission_type=a.permission_type.value) for a in acls])

    def on_response(resp: Any, conn: Any) -> Optional[KafkaError]:
        for a, r in zip(acls, resp.results):
            settle(futures[a], None, result_error(r.error_code, r.error_message))
        fail_all(futures)(client_error(KafkaError._BAD_MSG, "the broker's answer has fewer "
                                     "results than bindings sent"))
        return None

    runner.submit(Call("CreateAcls", ApiKey.CREATE_ACLS, ANY_BROKER, opts.deadline, build,
                       on_response, fail_all(futures)))


def _filter_fields(f: AclBindingFilter, version: int) -> Dict[str, Any]:
    _check_pattern(f.resource_pattern_type, version, True)
    return dict(resource_type_filter=f.restype.value, resource_name_filter=f.name,
                pattern_type_filter=f.resource_pattern_type.value,
                principal_filter=f.principal, host_filter=f.host,
                operation=f.operation.value, permission_type=f.permission_type.value)


def describe_acls(runner: CallRunner, acl_filter: AclBindingFilter, future: Future,
                  opts: Options) -> None:
    def build(version: int) -> Any:
        fields = _filter_fields(acl_filter, version)
        if version < 1:  # v0 knows literal ACLs only and has no pattern field
            fields.pop("pattern_type_filter")
        return DescribeAclsRequest(**fields)

    def on_response(resp: Any, conn: Any) -> Optional[KafkaError]:
        if resp.error_code:
            settle(future, error=result_error(resp.error_code, resp.error_message))
            return None
        settle(future, [_binding(r.resource_type, r.resource_name,
                                 getattr(r, "pattern_type", ResourcePatternType.LITERAL.value),
                                 a.principal, a.host, a.operation, a.permission_type)
                        for r in resp.resources for a in r.acls])
        return None

    runner.submit(Call("DescribeAcls", ApiKey.DESCRIBE_ACLS, ANY_BROKER, opts.deadline, build,
                       on_response, lambda error: settle(future, error=error)))


def delete_acls(runner: CallRunner, filters: List[AclBindingFilter],
                futures: Dict[AclBindingFilter, Future], opts: Options) -> None:
    def build(version: int) -> Any:
        out = []
        for f in filters:
            fields = _filter_fields(f, version)
            if version < 1:
                fields.pop("pattern_type_filter")
            out.append(DeleteAclsRequest.DeleteAclsFilter(**fields))
        return DeleteAclsRequest(filters=out)

    def on_response(resp: Any, conn: Any) -> Optional[KafkaError]:
        for f, r in zip(filters, resp.filter_results):
            err = result_error(r.error_code, r.error_message)
            if err is None:
                bad = next((m for m in r.matching_acls if m.error_code), None)
                if bad is not None:
                    err = result_error(bad.error_code, bad.error_message)
            settle(futures[f], None if err else [
                _binding(m.resource_type, m.resource_name,
                         getattr(m, "pattern_type", ResourcePatternType.LITERAL.value),
                         m.principal, m.host, m.operation, m.permission_type)
                for m in r.matching_acls], err)
        fail_all(futures)(client_error(KafkaError._BAD_MSG, "the broker's answer has fewer "
                                     "results than filters sent"))
        return None

    runner.submit(Call("DeleteAcls", ApiKey.DELETE_ACLS, ANY_BROKER, opts.deadline, build,
                       on_response, fail_all(futures)))


# --------------------------------------------------------------------------- SCRAM


@dataclass
class ScramUpsert:
    """An upsertion as sent: the password already salted (on the application thread)."""

    user: str
    mechanism: ScramMechanism
    iterations: int
    salt: bytes
    salted_password: bytes


def _scram_description(r: Any) -> UserScramCredentialsDescription:
    return UserScramCredentialsDescription(r.user, [
        ScramCredentialInfo(enum_or_unknown(ScramMechanism, c.mechanism), c.iterations)
        for c in r.credential_infos])


def describe_user_scram_credentials(runner: CallRunner, users: Optional[List[str]],
                                    futures: Dict[Optional[str], Future],
                                    opts: Options) -> None:
    """``users`` None: every user, one future (key None) whose result is ``{user:
    description}``; else a future per user."""
    def build(version: int) -> Any:
        return DescribeUserScramCredentialsRequest(users=None if users is None else [
            DescribeUserScramCredentialsRequest.UserName(name=u) for u in users])

    def on_response(resp: Any, conn: Any) -> Optional[KafkaError]:
        if resp.error_code in _RETRIED:
            return result_error(resp.error_code, resp.error_message)
        if resp.error_code:
            fail_all(futures)(code_error(resp.error_code, resp.error_message))
            return None
        if users is None:
            failed = next((r for r in resp.results if r.error_code), None)
            settle(futures[None], None if failed else {
                r.user: _scram_description(r) for r in resp.results},
                None if failed is None else broker_error(
                    failed.error_code, failed.error_message,
                    f"user {failed.user!r}"))
            return None
        for r in resp.results:
            fut = futures.get(r.user)
            if fut is not None:
                settle(fut, None if r.error_code else _scram_description(r),
                       result_error(r.error_code, r.error_message))
        fail_all(futures)(client_error(KafkaError._BAD_MSG,
                                       "the broker's answer has no result for this user"))
        return None

    runner.submit(Call("DescribeUserScramCredentials", ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
                       CONTROLLER, opts.deadline, build, on_response, fail_all(futures)))


def alter_user_scram_credentials(runner: CallRunner, deletions: List[Tuple[str, int]],
                                 upsertions: List[ScramUpsert], futures: Dict[str, Future],
                                 opts: Options) -> None:
    """``deletions`` as (user, mechanism number); one result (and future) per user."""
    pending: Dict[str, None] = dict.fromkeys(futures)

    def build(version: int) -> Any:
        R = AlterUserScramCredentialsRequest
        return R(deletions=[R.ScramCredentialDeletion(name=u, mechanism=m)
                            for u, m in deletions if u in pending],
                 upsertions=[R.ScramCredentialUpsertion(
                     name=u.user, mechanism=u.mechanism.value, iterations=u.iterations,
                     salt=u.salt, salted_password=u.salted_password)
                     for u in upsertions if u.user in pending])

    def on_response(resp: Any, conn: Any) -> Optional[KafkaError]:
        return _settle_by_name(resp.results, futures, pending, key="user")

    runner.submit(Call("AlterUserScramCredentials", ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
                       CONTROLLER, opts.deadline, build, on_response, fail_all(futures)))


# --------------------------------------------------------------------------- leaders


def elect_leaders(runner: CallRunner, election_type: int,
                  partitions: Optional[List[PartitionKey]], future: Future,
                  opts: Options) -> None:
    """ElectLeaders (KIP-460) to the controller: the future's result is
    ``{TopicPartition: None or KafkaError}``, every partition when ``partitions`` is
    None."""
    def build(version: int) -> Any:
        return ElectLeadersRequest(
            election_type=election_type,
            topic_partitions=None if partitions is None else [
                ElectLeadersRequest.TopicPartitions(topic=t, partitions=ps)
                for t, ps in group_by_topic(partitions).items()],
            timeout_ms=opts.operation_timeout_ms)

    def on_response(resp: Any, conn: Any) -> Optional[KafkaError]:
        code = getattr(resp, "error_code", 0)
        if code in _RETRIED:
            return result_error(code, None)
        if code:
            settle(future, error=broker_error(code, None, "ElectLeaders"))
            return None
        # A KafkaError per failed partition, as confluent-kafka's result holds (its
        # docstring says KafkaException; the objects are KafkaError). Its keys carry the
        # error too, and offset 0, as librdkafka's partition list does: programs read
        # either ``error`` or ``key.error``.
        out: Dict[TopicPartition, Optional[KafkaError]] = {}
        for t in resp.replica_election_results:
            for p in t.partition_result:
                error = entry_error(p.error_code, p.error_message)
                out[TopicPartition(t.topic, p.partition_id, 0)._set_error(error)] = error
        settle(future, out)
        return None

    # v0 elects the preferred replica only; the unclean election needs v1.
    runner.submit(Call("ElectLeaders", ApiKey.ELECT_LEADERS, CONTROLLER, opts.deadline, build,
                       on_response, lambda error: settle(future, error=error),
                       min_version=1 if election_type else 0))
