"""Cluster and topic APIs: ApiVersions, Metadata, DescribeCluster, CreateTopics,
DeleteTopics, CreatePartitions, DescribeConfigs, AlterConfigs, IncrementalAlterConfigs and
ElectLeaders; the SCRAM credential APIs (DescribeUserScramCredentials,
AlterUserScramCredentials)."""
from __future__ import annotations

import re
from typing import Any, Dict, Iterable, List, Mapping, Optional, Set

from kafka_proto.enums import (
    AclOperation, AclResourceType, AlterConfigOp, ConfigResourceType, ConfigSource, ElectionType,
    EndpointType,
)
from kafka_proto.errors import ErrorCode
from kafka_proto.messages import (
    AlterConfigsResponse,
    AlterUserScramCredentialsResponse,
    ApiKey,
    ApiVersionsResponse,
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteTopicsResponse,
    DescribeClusterResponse,
    DescribeConfigsResponse,
    DescribeUserScramCredentialsResponse,
    ElectLeadersResponse,
    IncrementalAlterConfigsResponse,
    MetadataResponse,
)

from ._acls import CLUSTER_NAME
from ._api import RequestContext, error_answer, handles, served_api_versions
from ._config import (
    BROKER_CONFIGS,
    TOPIC_CONFIGS,
    ConfigError,
    resolve_topic_config,
    to_text,
)
from ._controller import ControllerError, TopicInfo
from ._sasl import SCRAM_WIRE, ScramAdminError
from ._share_groups import SHARE_GROUP_CONFIGS



# --------------------------------------------------------------------------- ApiVersions


@error_answer(ApiKey.API_VERSIONS)
def api_versions_error(request: Any, version: int, code: int) -> Any:
    return ApiVersionsResponse(error_code=code)


#: KIP-511: what Kafka accepts as a client software name or version (v3+).
_SOFTWARE_NAME_OR_VERSION = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9.-]*[a-zA-Z0-9])?")


@handles(ApiKey.API_VERSIONS)
def api_versions(ctx: RequestContext) -> None:
    req = ctx.request
    ctx.note(client_software=(req.client_software_name, req.client_software_version))
    if ctx.version >= 3 and not all(
            _SOFTWARE_NAME_OR_VERSION.fullmatch(value or "")
            for value in (req.client_software_name, req.client_software_version)):
        # As Kafka: INVALID_REQUEST and no ranges.
        ctx.respond(ApiVersionsResponse(error_code=ErrorCode.INVALID_REQUEST))
        return
    ctx.respond(ApiVersionsResponse(error_code=ErrorCode.NONE, api_keys=served_api_versions(
        ctx.broker.legacy_versions)))


# --------------------------------------------------------------------------- Metadata


def _broker_list(ctx: RequestContext) -> List[Any]:
    return [MetadataResponse.MetadataResponseBroker(node_id=b.broker_id, host=b.host,
                                                    port=b.client_port, rack=b.rack)
            for b in sorted(ctx.server.brokers.values(), key=lambda b: b.broker_id) if b.up]


def _topic_metadata(ctx: RequestContext, info: TopicInfo) -> Any:
    live = set(ctx.broker.controller.live_brokers())
    parts = []
    for part in info.partitions:
        error = ErrorCode.NONE if part.leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE
        parts.append(MetadataResponse.MetadataResponsePartition(
            error_code=error, partition_index=part.index, leader_id=part.leader,
            leader_epoch=part.leader_epoch, replica_nodes=list(part.replicas),
            isr_nodes=list(part.isr),
            offline_replicas=[r for r in part.replicas if r not in live]))
    return MetadataResponse.MetadataResponseTopic(
        error_code=ErrorCode.NONE, name=info.name, topic_id=info.topic_id,
        is_internal=info.internal, partitions=parts)


@error_answer(ApiKey.METADATA)
def metadata_error(request: Any, version: int, code: int) -> Any:
    return MetadataResponse(brokers=[], topics=[
        MetadataResponse.MetadataResponseTopic(error_code=code, name=t.name or "",
                                               topic_id=t.topic_id, partitions=[])
        for t in (request.topics or [])])


def _may(ctx: RequestContext, operation: AclOperation, topic: str) -> bool:
    return ctx.allowed(operation, AclResourceType.TOPIC, topic)


def _may_create(ctx: RequestContext, topic: str) -> bool:
    """Kafka: CREATE on the cluster, or else on the topic."""
    return ctx.allowed(AclOperation.CREATE, AclResourceType.CLUSTER, CLUSTER_NAME) or \
        _may(ctx, AclOperation.CREATE, topic)


def _may_cluster(ctx: RequestContext, operation: AclOperation) -> bool:
    return ctx.allowed(operation, AclResourceType.CLUSTER, CLUSTER_NAME)


@handles(ApiKey.METADATA)
def metadata(ctx: RequestContext) -> None:
    req = ctx.request
    controller = ctx.broker.controller
    settings = ctx.server.settings
    topics = []
    wanted = req.topics
    asks_all = wanted is None or (ctx.version == 0 and not wanted)
    ctx.note(requested_topics=None if asks_all else len(wanted))
    if asks_all:
        # Kafka lists only the topics the principal may describe.
        topics = [_topic_metadata(ctx, info) for info in controller.topics.values()
                  if _may(ctx, AclOperation.DESCRIBE, info.name)]
    else:
        auto_create = settings["auto.create.topics.enable"] and \
            (ctx.version < 4 or req.allow_auto_topic_creation)
        for t in wanted:
            info: Optional[TopicInfo] = None
            name = t.name
            if name is None and ctx.version >= 10:
                info = controller.topics_by_id.get(t.topic_id)
                if info is None:
                    topics.append(MetadataResponse.MetadataResponseTopic(
                        error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=t.topic_id))
                    continue
                if not _may(ctx, AclOperation.DESCRIBE, info.name):
                    topics.append(MetadataResponse.MetadataResponseTopic(
                        error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=None,
                        topic_id=t.topic_id))
                    continue
            else:
                info = controller.topics.get(name)
                # Kafka: a topic the principal may not describe is refused whether it
                # exists or not; one it would auto-create needs CREATE (cluster or topic).
                if not _may(ctx, AclOperation.DESCRIBE, name) or (
                        info is None and auto_create and not _may_create(ctx, name)):
                    topics.append(MetadataResponse.MetadataResponseTopic(
                        error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name))
                    continue
            if info is None and auto_create:
                try:
                    info = controller.create_topic(name, -1, -1)
                    ctx.note(auto_created=name)
                except ControllerError as exc:
                    topics.append(MetadataResponse.MetadataResponseTopic(
                        error_code=exc.code, name=name))
                    continue
            if info is None:
                topics.append(MetadataResponse.MetadataResponseTopic(
                    error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name))
                continue
            topics.append(_topic_metadata(ctx, info))
    live = controller.live_brokers()
    response = MetadataResponse(
        brokers=_broker_list(ctx), cluster_id=ctx.server.cluster_id,
        controller_id=live[0] if live else -1, topics=topics)
    # KIP-430: the cluster's operations up to v10 (later versions dropped the field for
    # DescribeCluster), every named topic's but an unknown id's or a refused one's.
    if 8 <= ctx.version <= 10 and req.include_cluster_authorized_operations:
        response.cluster_authorized_operations = ctx.authorized_operations(
            AclResourceType.CLUSTER, CLUSTER_NAME)
    if ctx.version >= 8 and req.include_topic_authorized_operations:
        for topic in topics:
            if topic.error_code not in (ErrorCode.UNKNOWN_TOPIC_ID,
                                        ErrorCode.TOPIC_AUTHORIZATION_FAILED):
                topic.topic_authorized_operations = ctx.authorized_operations(
                    AclResourceType.TOPIC, topic.name)
    ctx.respond(response)


# --------------------------------------------------------------------------- DescribeCluster


@error_answer(ApiKey.DESCRIBE_CLUSTER)
def describe_cluster_error(request: Any, version: int, code: int) -> Any:
    return DescribeClusterResponse(error_code=code, cluster_id="", controller_id=-1,
                                   endpoint_type=EndpointType.BROKER)


@handles(ApiKey.DESCRIBE_CLUSTER)
def describe_cluster(ctx: RequestContext) -> None:
    req = ctx.request
    wanted = req.endpoint_type if ctx.version >= 1 else EndpointType.BROKER
    if wanted not in (EndpointType.BROKER, EndpointType.CONTROLLER):
        # Kafka's codes: v0 knows no endpoint errors.
        ctx.respond(DescribeClusterResponse(
            error_code=ErrorCode.INVALID_REQUEST if ctx.version == 0
            else ErrorCode.UNSUPPORTED_ENDPOINT_TYPE, cluster_id="",
            error_message=f"Unsupported endpoint type {wanted}"))
        return
    if wanted != EndpointType.BROKER:   # the listeners are brokers' ones
        ctx.respond(DescribeClusterResponse(
            error_code=ErrorCode.MISMATCHED_ENDPOINT_TYPE, cluster_id="",
            error_message="The request was sent to an endpoint of type BROKER, but we "
                          "wanted an endpoint of type CONTROLLER"))
        return
    live = ctx.broker.controller.live_brokers()
    R = DescribeClusterResponse
    response = R(error_code=ErrorCode.NONE, endpoint_type=EndpointType.BROKER,
                 cluster_id=ctx.server.cluster_id, controller_id=live[0] if live else -1,
                 brokers=[R.DescribeClusterBroker(broker_id=b.node_id, host=b.host,
                                                  port=b.port, rack=b.rack)
                          for b in _broker_list(ctx)])
    if req.include_cluster_authorized_operations:
        response.cluster_authorized_operations = ctx.authorized_operations(
            AclResourceType.CLUSTER, CLUSTER_NAME)
    ctx.respond(response)


# --------------------------------------------------------------------------- CreateTopics

DUPLICATE_TOPIC = "Duplicate topic name."


def _named_twice(names: Iterable[str]) -> List[str]:
    """The names that appear more than once, in the order of their first appearance."""
    seen: Set[str] = set()
    twice: Dict[str, None] = {}
    for name in names:
        if name in seen:
            twice[name] = None
        seen.add(name)
    return list(twice)



@error_answer(ApiKey.CREATE_TOPICS)
def create_topics_error(request: Any, version: int, code: int) -> Any:
    return CreateTopicsResponse(topics=[
        CreateTopicsResponse.CreatableTopicResult(name=t.name, error_code=code)
        for t in request.topics])


@handles(ApiKey.CREATE_TOPICS)
def create_topics(ctx: RequestContext) -> None:
    req = ctx.request
    controller = ctx.broker.controller
    # A name given twice is refused once, and neither entry is acted on (Kafka's
    # controller: INVALID_REQUEST, "Duplicate topic name.").
    twice = _named_twice(t.name for t in req.topics)
    results = [CreateTopicsResponse.CreatableTopicResult(
        name=name, error_code=ErrorCode.INVALID_REQUEST, error_message=DUPLICATE_TOPIC)
        for name in twice]
    for t in req.topics:
        if t.name in twice:
            continue
        result = CreateTopicsResponse.CreatableTopicResult(name=t.name)
        if not _may_create(ctx, t.name):
            result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            result.error_message = "Authorization failed."
            results.append(result)
            continue
        configs = {c.name: c.value for c in t.configs}
        assignments = {a.partition_index: list(a.broker_ids) for a in t.assignments}
        try:
            info = controller.create_topic(t.name, t.num_partitions, t.replication_factor,
                                           assignments or None, configs, req.validate_only)
        except ControllerError as exc:
            result.error_code = exc.code
            result.error_message = exc.message
            results.append(result)
            continue
        result.error_code = ErrorCode.NONE
        result.topic_id = info.topic_id
        result.num_partitions = len(info.partitions) if info.partitions else t.num_partitions
        result.replication_factor = len(info.partitions[0].replicas) if info.partitions \
            else t.replication_factor
        if not _may(ctx, AclOperation.DESCRIBE_CONFIGS, t.name):
            # Kafka answers the configs only to a principal that may describe them.
            result.topic_config_error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            results.append(result)
            continue
        result.configs = [CreateTopicsResponse.CreatableTopicConfigs(
            name=name, value=to_text(value), read_only=False,
            config_source=(ConfigSource.TOPIC_CONFIG if name in info.overrides
                           else ConfigSource.DEFAULT_CONFIG),
            is_sensitive=False) for name, value in sorted(info.values.items())]
        results.append(result)
    ctx.respond(CreateTopicsResponse(topics=results))


# --------------------------------------------------------------------------- DeleteTopics


@error_answer(ApiKey.DELETE_TOPICS)
def delete_topics_error(request: Any, version: int, code: int) -> Any:
    names = [t.name for t in request.topics] if version >= 6 else list(request.topic_names)
    return DeleteTopicsResponse(responses=[
        DeleteTopicsResponse.DeletableTopicResult(name=n, error_code=code) for n in names])


@handles(ApiKey.DELETE_TOPICS)
def delete_topics(ctx: RequestContext) -> None:
    req = ctx.request
    controller = ctx.broker.controller
    wanted = []
    if ctx.version >= 6:
        for t in req.topics:
            if t.name is None:
                info = controller.topics_by_id.get(t.topic_id)
                wanted.append((info.name if info else None, t.topic_id))
            else:
                wanted.append((t.name, None))
    else:
        wanted = [(n, None) for n in req.topic_names]
    twice = _named_twice(name for name, _ in wanted if name is not None)
    results = [DeleteTopicsResponse.DeletableTopicResult(
        name=name, error_code=ErrorCode.INVALID_REQUEST, error_message=DUPLICATE_TOPIC)
        for name in twice]
    for name, topic_id in wanted:
        if name in twice:
            continue
        result = DeleteTopicsResponse.DeletableTopicResult(name=name)
        if name is None:
            result.topic_id = topic_id
            result.error_code = ErrorCode.UNKNOWN_TOPIC_ID
            results.append(result)
            continue
        if topic_id is not None and not _may(ctx, AclOperation.DESCRIBE, name):
            # Kafka: named by id, the topic's name is not given away.
            result.name, result.topic_id = None, topic_id
            result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            result.error_message = "Authorization failed."
            results.append(result)
            continue
        info = controller.topics.get(name)
        if info is not None:
            result.topic_id = info.topic_id
        if not _may(ctx, AclOperation.DELETE, name):
            result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            result.error_message = "Authorization failed."
            results.append(result)
            continue
        try:
            controller.delete_topic(name)
            result.error_code = ErrorCode.NONE
        except ControllerError as exc:
            result.error_code = exc.code
            result.error_message = exc.message
        results.append(result)
    ctx.respond(DeleteTopicsResponse(responses=results))


# --------------------------------------------------------------------------- CreatePartitions


@error_answer(ApiKey.CREATE_PARTITIONS)
def create_partitions_error(request: Any, version: int, code: int) -> Any:
    return CreatePartitionsResponse(results=[
        CreatePartitionsResponse.CreatePartitionsTopicResult(name=t.name, error_code=code)
        for t in request.topics])


@handles(ApiKey.CREATE_PARTITIONS)
def create_partitions(ctx: RequestContext) -> None:
    req = ctx.request
    twice = _named_twice(t.name for t in req.topics)
    results = [CreatePartitionsResponse.CreatePartitionsTopicResult(
        name=name, error_code=ErrorCode.INVALID_REQUEST, error_message=DUPLICATE_TOPIC)
        for name in twice]
    for t in req.topics:
        if t.name in twice:
            continue
        result = CreatePartitionsResponse.CreatePartitionsTopicResult(name=t.name)
        if not _may(ctx, AclOperation.ALTER, t.name):
            result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            result.error_message = "Authorization failed."
            results.append(result)
            continue
        assignments = [list(a.broker_ids) for a in t.assignments] if t.assignments else None
        try:
            ctx.broker.controller.create_partitions(t.name, t.count, assignments,
                                                    req.validate_only)
            result.error_code = ErrorCode.NONE
        except ControllerError as exc:
            result.error_code = exc.code
            result.error_message = exc.message
        results.append(result)
    ctx.respond(CreatePartitionsResponse(results=results))


# --------------------------------------------------------------------------- DescribeConfigs


@error_answer(ApiKey.DESCRIBE_CONFIGS)
def describe_configs_error(request: Any, version: int, code: int) -> Any:
    return DescribeConfigsResponse(results=[
        DescribeConfigsResponse.DescribeConfigsResult(
            error_code=code, resource_type=r.resource_type, resource_name=r.resource_name)
        for r in request.resources])


def _config_entries(values: Dict[str, Any], sources: Mapping[str, int],
                    keys: Optional[List[str]],
                    include_synonyms: bool, sensitive: Dict[str, bool],
                    read_only: bool) -> List[Any]:
    R = DescribeConfigsResponse
    out = []
    for name in sorted(values):
        if keys is not None and name not in keys:
            continue
        source = sources.get(name, ConfigSource.DEFAULT_CONFIG)
        value = None if sensitive.get(name) else to_text(values[name])
        entry = R.DescribeConfigsResourceResult(
            name=name, value=value, read_only=read_only,
            is_default=source == ConfigSource.DEFAULT_CONFIG,
            config_source=source, is_sensitive=sensitive.get(name, False))
        if include_synonyms:
            entry.synonyms = [R.DescribeConfigsSynonym(name=name, value=value, source=source)]
        out.append(entry)
    return out


def _config_refusal(ctx: RequestContext, resource_type: int, name: str,
                    operation: AclOperation) -> Optional[int]:
    """Kafka's check of a config resource: ``operation`` on the topic, or on the cluster
    for a broker or broker logger."""
    if resource_type == ConfigResourceType.TOPIC:
        if not _may(ctx, operation, name):
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED
    elif resource_type in (ConfigResourceType.BROKER, ConfigResourceType.BROKER_LOGGER):
        if not _may_cluster(ctx, operation):
            return ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    return None


@handles(ApiKey.DESCRIBE_CONFIGS)
def describe_configs(ctx: RequestContext) -> None:
    R = DescribeConfigsResponse
    req = ctx.request
    server = ctx.server
    results = []
    for r in req.resources:
        result = R.DescribeConfigsResult(resource_type=r.resource_type,
                                         resource_name=r.resource_name, configs=[])
        keys = list(r.configuration_keys) if r.configuration_keys is not None else None
        refused = _config_refusal(ctx, r.resource_type, r.resource_name,
                                  AclOperation.DESCRIBE_CONFIGS)
        if refused is not None:
            result.error_code = refused
            result.error_message = "Authorization failed."
        elif r.resource_type == ConfigResourceType.TOPIC:
            info = ctx.broker.controller.topics.get(r.resource_name)
            if info is None:
                result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                result.error_message = f"no topic {r.resource_name!r}"
            else:
                sources = {}
                for name, d in TOPIC_CONFIGS.items():
                    if name in info.overrides:
                        sources[name] = ConfigSource.TOPIC_CONFIG
                    elif d.broker_synonym and d.broker_synonym in server.broker_overrides:
                        sources[name] = ConfigSource.STATIC_BROKER_CONFIG
                result.configs = _config_entries(info.values, sources, keys,
                                                 req.include_synonyms, {}, False)
        elif r.resource_type == ConfigResourceType.BROKER:
            try:
                broker_id = int(r.resource_name) if r.resource_name else ctx.broker.broker_id
            except ValueError:
                broker_id = -1
            if broker_id not in server.brokers:
                result.error_code = ErrorCode.INVALID_REQUEST
                result.error_message = f"no broker {r.resource_name!r}"
            else:
                values = dict(server.settings.values)
                values["broker.id"] = broker_id
                static = ConfigSource.STATIC_BROKER_CONFIG
                sources = {name: static for name in server.broker_overrides}
                sources["broker.id"] = static
                rack = server.brokers[broker_id].rack
                if rack is not None:
                    values["broker.rack"] = rack
                    sources["broker.rack"] = static
                sensitive = {n: d.sensitive for n, d in BROKER_CONFIGS.items()}
                result.configs = _config_entries(values, sources, keys, req.include_synonyms,
                                                 sensitive, True)
        elif r.resource_type == ConfigResourceType.BROKER_LOGGER:
            result.configs = []
        else:
            result.error_code = ErrorCode.INVALID_REQUEST
            result.error_message = f"unknown resource type {r.resource_type}"
        results.append(result)
    ctx.respond(R(results=results))


# --------------------------------------------------------------------------- AlterConfigs

# IncrementalAlterConfigs' operations.


class _Refused(Exception):
    """One resource of an AlterConfigs/IncrementalAlterConfigs refused: its answer."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _alter_answer(response_cls: Any, request: Any, code: int) -> Any:
    R = response_cls
    return R(responses=[R.AlterConfigsResourceResponse(
        error_code=code, resource_type=r.resource_type, resource_name=r.resource_name)
        for r in request.resources])


@error_answer(ApiKey.ALTER_CONFIGS)
def alter_configs_error(request: Any, version: int, code: int) -> Any:
    return _alter_answer(AlterConfigsResponse, request, code)


@error_answer(ApiKey.INCREMENTAL_ALTER_CONFIGS)
def incremental_alter_configs_error(request: Any, version: int, code: int) -> Any:
    return _alter_answer(IncrementalAlterConfigsResponse, request, code)


def _topic_to_alter(ctx: RequestContext, resource: Any) -> TopicInfo:
    """The topic a TOPIC resource names; other resource types are refused as Kafka
    refuses configs it cannot change (the cluster's broker configs are all static)."""
    refused = _config_refusal(ctx, resource.resource_type, resource.resource_name,
                              AclOperation.ALTER_CONFIGS)
    if refused is not None:
        raise _Refused(refused, "Authorization failed.")
    if resource.resource_type == ConfigResourceType.BROKER:
        names = sorted(c.name for c in resource.configs)
        raise _Refused(ErrorCode.INVALID_REQUEST, "Cannot update these configs "
                       f"dynamically: {', '.join(names)} (the test cluster's broker "
                       "configs are static)")
    if resource.resource_type != ConfigResourceType.TOPIC:
        raise _Refused(ErrorCode.INVALID_REQUEST, "the test cluster alters topic configs "
                       f"only, not resource type {resource.resource_type}")
    info = ctx.broker.controller.topics.get(resource.resource_name)
    if info is None:
        raise _Refused(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                       f"no topic {resource.resource_name!r}")
    return info


def _apply_topic_config(ctx: RequestContext, info: TopicInfo, overrides: Dict[str, Any],
                        validate_only: bool) -> None:
    try:
        if validate_only:
            resolve_topic_config(ctx.server.settings.values, overrides)
        else:
            ctx.broker.controller.alter_topic_config(info.name, overrides)
    except ConfigError as exc:
        raise _Refused(ErrorCode.INVALID_CONFIG, str(exc)) from None
    except ControllerError as exc:
        raise _Refused(exc.code, exc.message) from None


def _answer_alter(ctx: RequestContext, response_cls: Any, alter: Any) -> None:
    """Run ``alter(resource)`` for each resource; answer each with its outcome. A
    resource named twice is refused (each time) and left alone, as Kafka does."""
    R = response_cls
    out = []
    keys = [(r.resource_type, r.resource_name) for r in ctx.request.resources]
    for r, key in zip(ctx.request.resources, keys):
        answer = R.AlterConfigsResourceResponse(resource_type=r.resource_type,
                                                resource_name=r.resource_name)
        try:
            if keys.count(key) > 1:
                raise _Refused(ErrorCode.INVALID_REQUEST,
                               "Each resource must appear at most once.")
            alter(r)
            answer.error_code = ErrorCode.NONE
        except _Refused as exc:
            answer.error_code = exc.code
            answer.error_message = exc.message
        out.append(answer)
    ctx.respond(R(responses=out))


def _no_null_values(configs: Iterable[Any]) -> None:
    nulls = [c.name for c in configs
             if c.value is None
             and getattr(c, "config_operation", AlterConfigOp.SET) != AlterConfigOp.DELETE]
    if nulls:
        raise _Refused(ErrorCode.INVALID_REQUEST,
                       f"Null value not supported for : {', '.join(nulls)}")


@handles(ApiKey.ALTER_CONFIGS)
def alter_configs(ctx: RequestContext) -> None:
    """The legacy call: a topic's configs become exactly those given (the rest goes back
    to the defaults)."""
    def alter(r: Any) -> None:
        info = _topic_to_alter(ctx, r)
        _no_null_values(r.configs)
        _apply_topic_config(ctx, info, {c.name: c.value for c in r.configs},
                            ctx.request.validate_only)

    _answer_alter(ctx, AlterConfigsResponse, alter)


def _alter_group_config(ctx: RequestContext, r: Any) -> None:
    """SET or DELETE a share group's configs (KIP-932; the only group configs the cluster
    has), checked whole before any is applied."""
    if not ctx.allowed(AclOperation.ALTER_CONFIGS, AclResourceType.GROUP, r.resource_name):
        raise _Refused(ErrorCode.GROUP_AUTHORIZATION_FAILED, "Authorization failed.")
    names = [c.name for c in r.configs]
    if len(set(names)) != len(names):
        raise _Refused(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
    _no_null_values(r.configs)
    shares = ctx.server.share_groups
    changes = []
    for c in r.configs:
        if c.name not in SHARE_GROUP_CONFIGS:
            raise _Refused(ErrorCode.INVALID_CONFIG, f"Unknown group config name: {c.name}")
        if c.config_operation == AlterConfigOp.SET:
            changes.append((c.name, c.value))
        elif c.config_operation == AlterConfigOp.DELETE:
            changes.append((c.name, None))
        else:
            raise _Refused(ErrorCode.INVALID_CONFIG, f"Config value append or subtract is "
                           f"not allowed for config key: {c.name}")
    try:
        for name, value in changes:
            shares.check_config(name, value)
    except ValueError as exc:
        raise _Refused(ErrorCode.INVALID_CONFIG, str(exc)) from None
    if not ctx.request.validate_only:
        for name, value in changes:
            shares.set_config(r.resource_name, name, value)


@handles(ApiKey.INCREMENTAL_ALTER_CONFIGS)
def incremental_alter_configs(ctx: RequestContext) -> None:
    """SET, DELETE, APPEND and SUBTRACT (the last two for list configs) applied to a
    topic's own configs, as Kafka applies them."""
    def alter(r: Any) -> None:
        if r.resource_type == ConfigResourceType.GROUP:
            _alter_group_config(ctx, r)
            return
        info = _topic_to_alter(ctx, r)
        names = [c.name for c in r.configs]
        if len(set(names)) != len(names):
            raise _Refused(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
        _no_null_values(r.configs)
        overrides = dict(info.overrides)
        for c in r.configs:
            op = c.config_operation
            if op == AlterConfigOp.SET:
                overrides[c.name] = c.value
            elif op == AlterConfigOp.DELETE:
                overrides.pop(c.name, None)
            elif op in (AlterConfigOp.APPEND, AlterConfigOp.SUBTRACT):
                d = TOPIC_CONFIGS.get(c.name)
                if d is None or d.kind != "list":
                    verb = "append" if op == AlterConfigOp.APPEND else "subtract"
                    raise _Refused(ErrorCode.INVALID_CONFIG, f"Config value {verb} is not "
                                   f"allowed for config key: {c.name}")
                now = [v for v in to_text(info.values[c.name]).split(",") if v]
                given = [v.strip() for v in c.value.split(",") if v.strip()]
                if op == AlterConfigOp.APPEND:
                    now += [v for v in given if v not in now]
                else:
                    now = [v for v in now if v not in given]
                overrides[c.name] = ",".join(now)
            else:
                raise _Refused(ErrorCode.INVALID_REQUEST,
                               f"unknown config operation {op} for {c.name}")
        _apply_topic_config(ctx, info, overrides, ctx.request.validate_only)

    _answer_alter(ctx, IncrementalAlterConfigsResponse, alter)


# --------------------------------------------------------------------------- ElectLeaders


@error_answer(ApiKey.ELECT_LEADERS)
def elect_leaders_error(request: Any, version: int, code: int) -> Any:
    return ElectLeadersResponse(error_code=code, replica_election_results=[])


@handles(ApiKey.ELECT_LEADERS)
def elect_leaders(ctx: RequestContext) -> None:
    R = ElectLeadersResponse
    req = ctx.request
    controller = ctx.broker.controller
    unclean = ctx.version >= 1 and req.election_type == ElectionType.UNCLEAN
    every = req.topic_partitions is None
    if not _may_cluster(ctx, AclOperation.ALTER):
        # Kafka: the whole request and every partition named.
        ctx.respond(R(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                      replica_election_results=[] if every else [R.ReplicaElectionResult(
                          topic=t.topic, partition_result=[R.PartitionResult(
                              partition_id=p, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
                              for p in t.partitions]) for t in req.topic_partitions]))
        return
    if every:
        wanted = [(p.topic, p.index) for p in controller.all_partitions()]
    else:
        wanted = [(t.topic, p) for t in req.topic_partitions for p in t.partitions]
    by_topic: Dict[str, List[Any]] = {}
    for topic, index in wanted:
        code: int = ErrorCode.NONE
        message: Optional[str] = None
        try:
            controller.elect_leader(topic, index, unclean)
        except ControllerError as exc:
            code, message = exc.code, exc.message
        if every and code == ErrorCode.ELECTION_NOT_NEEDED:
            continue  # Kafka lists only what it tried, when asked for every partition
        by_topic.setdefault(topic, []).append(R.PartitionResult(
            partition_id=index, error_code=code, error_message=message))
    ctx.respond(R(error_code=ErrorCode.NONE, replica_election_results=[
        R.ReplicaElectionResult(topic=t, partition_result=ps) for t, ps in by_topic.items()]))


# --------------------------------------------------------------------------- SCRAM credentials


@error_answer(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS)
def describe_scram_error(request: Any, version: int, code: int) -> Any:
    return DescribeUserScramCredentialsResponse(error_code=code, results=[])


@handles(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS)
def describe_user_scram_credentials(ctx: RequestContext) -> None:
    R = DescribeUserScramCredentialsResponse
    if not _may_cluster(ctx, AclOperation.DESCRIBE):
        ctx.respond(R(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, results=[]))
        return
    users = ctx.request.users
    found = ctx.server.credentials.describe_scram([u.name for u in users] if users else None)
    numbers = {name: number for number, name in SCRAM_WIRE.items()}
    results = []
    for user, infos in found.items():
        if isinstance(infos, ScramAdminError):
            results.append(R.DescribeUserScramCredentialsResult(
                user=user, error_code=infos.code, error_message=infos.message))
        else:
            results.append(R.DescribeUserScramCredentialsResult(
                user=user, error_code=ErrorCode.NONE, credential_infos=[
                    R.CredentialInfo(mechanism=numbers[m], iterations=i) for m, i in infos]))
    ctx.respond(R(error_code=ErrorCode.NONE, results=results))


@error_answer(ApiKey.ALTER_USER_SCRAM_CREDENTIALS)
def alter_scram_error(request: Any, version: int, code: int) -> Any:
    users = dict.fromkeys([d.name for d in request.deletions] +
                          [u.name for u in request.upsertions])
    return AlterUserScramCredentialsResponse(results=[
        AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult(
            user=u, error_code=code) for u in users])


@handles(ApiKey.ALTER_USER_SCRAM_CREDENTIALS)
def alter_user_scram_credentials(ctx: RequestContext) -> None:
    R = AlterUserScramCredentialsResponse
    req = ctx.request
    if not _may_cluster(ctx, AclOperation.ALTER):
        ctx.respond(alter_scram_error(req, ctx.version, ErrorCode.CLUSTER_AUTHORIZATION_FAILED))
        return
    results = ctx.server.credentials.alter_scram(req.deletions, req.upsertions)
    ctx.note(scram_altered=sorted(u for u, e in results.items() if e is None))
    ctx.respond(R(results=[R.AlterUserScramCredentialsResult(
        user=u, error_code=ErrorCode.NONE if e is None else e.code,
        error_message=None if e is None else e.message) for u, e in results.items()]))
