"""``AdminClient``: confluent-kafka's admin API on our own I/O thread and codec.

    from kafka_client.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": "localhost:9092"})
    for topic, future in admin.create_topics([NewTopic("orders", 6)]).items():
        future.result()          # None, or raises KafkaException

Every call checks its input on the calling thread (TypeError / ValueError as
confluent-kafka raises them), hands the work to the client's I/O thread and returns
``concurrent.futures.Future`` objects, one per resource, which the I/O thread completes:
with the result, or with a :class:`~kafka_client.KafkaException` carrying the broker's
error for that resource (or the local one: timed out, unsupported by the broker, ...).
"""
from __future__ import annotations

import concurrent.futures
import threading
import time
import warnings
from typing import (
    Any,
    Callable,
    Dict,
    Iterable,
    List,
    Optional,
    Set,
    TypeVar,
    Union,
    overload,
)

from kafka_client._cluster.calls import CallRunner, PartitionKey
from kafka_client._cluster.telemetry import Sample, producer_samples
from kafka_client._interval import IntervalStat
from kafka_client._common import ClientBase, wait_limit
from kafka_client._model import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    ElectionType,
    IsolationLevel,
    TopicCollection,
)
from kafka_client.admin import _operations as ops
from kafka_client.admin._acl import AclBinding, AclBindingFilter
from kafka_client.admin._config import AlterConfigOpType, ConfigEntry, ConfigResource
from kafka_client.admin._groups import (
    ConsumerGroupDescription,
    GroupMetadata,
    ListConsumerGroupsResult,
    ShareGroupDescription,
)
from kafka_client.admin._scram import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialDeletion,
    UserScramCredentialsDescription,
    UserScramCredentialUpsertion,
    salted_password,
)
from kafka_client.admin._topics import (
    DeletedRecords,
    DescribeClusterResult,
    ListOffsetsResultInfo,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    TopicDescription,
)
from kafka_client.errors import KafkaError, KafkaException, client_error
from kafka_client.types import OFFSET_INVALID, TopicPartition

__all__ = ["AdminClient"]

Future = concurrent.futures.Future
K = TypeVar("K")

#: librdkafka's limits for the per-call timeouts (seconds) and topic counts.
_MAX_TIMEOUT = 3600.0
_MAX_PARTITIONS = 100000
_MAX_REPLICATION = 10000



def _future() -> Future:
    f: Future = Future()
    f.set_running_or_notify_cancel()  # as confluent-kafka's: cannot be cancelled
    return f


def _check_list(value: Any, what: str, allow_empty: bool = False,
                sized: bool = False) -> list:
    """A non-empty list. Another container is a ValueError, as confluent-kafka's
    (it reads the names through it, then refuses what is not a list), or a TypeError
    where that call first takes its ``len()`` (``sized``); what is no container (one
    object) is a TypeError. A str is a container there too: its characters are not
    what the call takes (ValueError)."""
    if not isinstance(value, list):
        container = hasattr(value, "__len__") if sized else hasattr(value, "__iter__")
        if container:
            raise ValueError(f"Expected non-empty list of {what}, not "
                             f"{type(value).__name__}")
        raise TypeError(f"Expected a list of {what}, not {type(value).__name__}")
    if not value and not allow_empty:
        raise ValueError(f"Expected non-empty list of {what}")
    return value


def _check_items(items: Iterable[Any], cls: type, what: str) -> None:
    for item in items:
        if not isinstance(item, cls):
            raise ValueError(f"Expected list of {what}, not {type(item).__name__}")


def _check_partition_list(value: Any, name: str, element: str, negative: str) -> None:
    """A list of TopicPartition with partitions not negative (confluent-kafka's texts:
    ``name`` and ``element`` say what the list is, ``negative`` the ValueError's text)."""
    if not isinstance(value, list):
        raise TypeError(f"Expected {name} to be a list, got '{type(value).__name__}'")
    for tp in value:
        if not isinstance(tp, TopicPartition):
            raise TypeError(f"Element of the {element} list must be of type "
                            f"'TopicPartition' got '{type(tp).__name__}'")
        if tp.partition < 0:
            raise ValueError(negative)


def _check_partition(tp: Any, what: str) -> None:
    if tp is None:
        raise ValueError(f"Element of '{what}' cannot be None")
    if not isinstance(tp, TopicPartition):
        raise TypeError(f"Element of '{what}' must be of type TopicPartition")
    if not tp.topic:
        raise ValueError(f"Element of '{what}' must not have 'topic' attribute as Empty")
    if tp.partition < 0:
        raise ValueError(f"Element of '{what}' must not have negative 'partition' value")


def _duplicates(keys: List[Any], futures: Dict[Any, Future], what: str,
                text: Optional[str] = None) -> bool:
    """Fail every future of a call that names something twice (as librdkafka does, with
    its words: ``text``, else "Duplicate <what> not allowed"); True if it did."""
    if len(set(keys)) == len(keys):
        return False
    for fut in futures.values():
        ops.settle(fut, error=client_error(KafkaError._INVALID_ARG,
                                         text or f"Duplicate {what} not allowed"))
    return True


def _named_twice(names: List[str], futures: Dict[str, Future]) -> Set[str]:
    """The topics named more than once in a CreateTopics, DeleteTopics or
    CreatePartitions call: their futures fail with INVALID_REQUEST, as Kafka answers
    confluent-kafka, which sends them (Kafka acts on neither entry, and on the other
    topics of the request); not sent, whatever the broker would do."""
    seen: Set[str] = set()
    twice: Set[str] = set()
    for name in names:
        (twice if name in seen else seen).add(name)
    for name in twice:
        ops.settle(futures[name], error=client_error(KafkaError.INVALID_REQUEST,
                                                   "Duplicate topic name."))
    return twice


def _nothing_produced(elapsed: float) -> List[Sample]:
    """The producer metrics of a client that produces nothing (KIP-714, as librdkafka's
    AdminClient pushes them)."""
    return producer_samples(IntervalStat(), IntervalStat())


class _Untrack:
    """A tracked future's done callback: takes it off its client's count, then lets go
    of the client."""

    __slots__ = ("client",)

    def __init__(self, client: "AdminClient") -> None:
        self.client: Optional[AdminClient] = client

    def __call__(self, future: Future) -> None:
        client, self.client = self.client, None
        if client is not None:
            with client._lock:
                client._outstanding.discard(future)


class AdminClient(ClientBase):
    """Administer topics, configurations, records, consumer groups and ACLs.

    ``AdminClient(conf)`` takes librdkafka's configuration properties (at least
    ``bootstrap.servers``), as a dict and/or keyword arguments. Calls return
    ``concurrent.futures.Future`` objects; their results are described per method. The
    per-call keyword arguments: ``request_timeout`` (seconds, default
    ``socket.timeout.ms``: the whole call including broker lookups and retries),
    ``operation_timeout`` (seconds the broker may wait for the change to spread through
    the cluster; default 0, answer at once, except for ``delete_records``: the request
    timeout, as in librdkafka) and ``validate_only`` (check the request on the broker
    without applying it).

    Done callbacks added to the futures run on the client's I/O thread: keep them short
    and never wait there for another of this client's futures.
    """

    _role = "admin"
    _closed_text = "AdminClient has been closed"

    def __init__(self, conf: Optional[Dict[str, Any]] = None, **kwargs: Any) -> None:
        self._init_client(conf, kwargs)
        self._runner = CallRunner(self._cluster)
        self._outstanding: Set[Future] = set()
        self._lock = threading.Lock()
        # librdkafka's AdminClient is a producer handle and pushes the producer's metrics
        # when a broker subscribes to them (KIP-714): the connections' and nothing queued.
        self._cluster.start_telemetry("producer", self._io.name, [_nothing_produced],
                                      overall_latency=True)
        self._start_client()

    # -- plumbing --------------------------------------------------------------------------
    def _options(self, request_timeout: Optional[float] = None,
                 operation_timeout: Optional[float] = None,
                 validate_only: bool = False, wait_by_default: bool = False,
                 **extra: Any) -> ops.Options:
        """The per-call options, checked as librdkafka checks them. The operation timeout
        defaults to 0 (the broker answers at once), with ``wait_by_default`` to the
        request timeout (librdkafka's default for DeleteRecords); -1 is the request
        timeout too."""
        self._check_open()
        default = self._cluster.settings.request_timeout
        req = _timeout(request_timeout, "request_timeout", 0.0, default)
        op = _timeout(operation_timeout, "operation_timeout", -1.0,
                      -1.0 if wait_by_default else 0.0)
        if not isinstance(validate_only, bool):
            raise TypeError(f"Expected validate_only to be bool type, not "
                            f"{type(validate_only).__name__}")
        op_ms = int(req * 1000) if op < 0 else int(op * 1000)
        return ops.Options(deadline=time.monotonic() + req, operation_timeout_ms=op_ms,
                           validate_only=validate_only, **extra)

    def _track(self, futures: Iterable[Future]) -> None:
        """Count the futures for ``len()`` until they complete. A future running keeps
        its client alive (``AdminClient(conf).create_topics(...)`` without keeping the
        client works); a completed one lets it go: it keeps its callbacks, and one the
        application keeps held a dropped client (its I/O thread, its connections)."""
        for f in futures:
            with self._lock:
                self._outstanding.add(f)
            f.add_done_callback(_Untrack(self))

    def _start(self, operation: Callable[..., None], *args: Any) -> None:
        """Run ``operation(runner, *args)`` on the I/O thread."""
        self._io.call_soon(operation, self._runner, *args)

    def _keyed(self, keys: List[K]) -> Dict[K, Future]:
        futures = {k: _future() for k in keys}
        self._track(futures.values())
        return futures

    # -- topics ----------------------------------------------------------------------------
    def create_topics(self, new_topics: List[NewTopic], *,
                      operation_timeout: Optional[float] = None,
                      request_timeout: Optional[float] = None,
                      validate_only: bool = False) -> Dict[str, Future[None]]:
        """Create topics. Returns ``{topic: future}``; each future's result is None.

        Names that Kafka does not allow (empty, ``.``/``..``, longer than 249
        characters, characters other than ASCII letters, digits, ``._-``) fail their
        future with TOPIC_EXCEPTION without being sent, whatever the broker would accept.
        """
        _check_list(new_topics, "NewTopic objects")
        _check_items(new_topics, NewTopic, "NewTopic objects")
        for t in new_topics:
            _check_new_topic(t)
        opts = self._options(request_timeout, operation_timeout, validate_only)
        names = [t.topic for t in new_topics]
        futures = self._keyed(names)
        twice = _named_twice(names, futures)
        todo = [t for t in new_topics if t.topic not in twice]
        if todo:
            self._start(ops.create_topics, todo, futures, opts)
        return futures

    def delete_topics(self, topics: List[str], *, operation_timeout: Optional[float] = None,
                      request_timeout: Optional[float] = None) -> Dict[str, Future[None]]:
        """Delete topics. Returns ``{topic: future}``; each future's result is None."""
        if not isinstance(topics, list):
            raise TypeError(f"argument 1 must be list, not {type(topics).__name__}")
        if not topics:
            raise ValueError("Expected non-empty list of topic strings")
        for t in topics:
            if not isinstance(t, str):
                raise ValueError(f"Expected list of topic strings, not {type(t).__name__}")
        opts = self._options(request_timeout, operation_timeout)
        futures = self._keyed(topics)
        twice = _named_twice(topics, futures)
        todo = [t for t in topics if t not in twice]
        if todo:
            self._start(ops.delete_topics, todo, futures, opts)
        return futures

    def create_partitions(self, new_partitions: List[NewPartitions], *,
                          operation_timeout: Optional[float] = None,
                          request_timeout: Optional[float] = None,
                          validate_only: bool = False) -> Dict[str, Future[None]]:
        """Grow topics to ``new_total_count`` partitions. Returns ``{topic: future}``;
        each future's result is None."""
        _check_list(new_partitions, "NewPartitions objects")
        _check_items(new_partitions, NewPartitions, "NewPartitions objects")
        for p in new_partitions:
            if not 1 <= p.new_total_count <= _MAX_PARTITIONS:
                raise ValueError(f"Invalid NewPartitions({p.topic}): new_total_count "
                                 f"{p.new_total_count} is out of the expected range "
                                 f"1..{_MAX_PARTITIONS}")
            if p.replica_assignment is not None:
                _check_assignment(p.replica_assignment, None, f"NewPartitions({p.topic})")
        opts = self._options(request_timeout, operation_timeout, validate_only)
        names = [p.topic for p in new_partitions]
        futures = self._keyed(names)
        twice = _named_twice(names, futures)
        todo = [p for p in new_partitions if p.topic not in twice]
        if todo:
            self._start(ops.create_partitions, todo, futures, opts)
        return futures

    def describe_topics(self, topics: TopicCollection, *,
                        include_authorized_operations: bool = False,
                        request_timeout: Optional[float] = None
                        ) -> Dict[str, Future[TopicDescription]]:
        """Describe topics. Returns ``{topic: future}``; each result is a
        :class:`~kafka_client.admin.TopicDescription`."""
        if not isinstance(topics, TopicCollection):
            raise TypeError("Expected input to be instance of TopicCollection")
        names = topics.topic_names
        if not isinstance(names, list):
            raise TypeError("Expected list of topic names to be described")
        for i, name in enumerate(names):
            if not isinstance(name, str):
                raise TypeError(f"Expected list of topics strings, not "
                                f"{type(name).__name__}")
            if not name:
                raise ValueError(f"Empty topic name at index {i} isn't allowed")
        opts = self._options(request_timeout,
                             include_authorized_operations=_bool(
                                 include_authorized_operations,
                                 "include_authorized_operations"))
        futures = self._keyed(names)
        if names and not _duplicates(names, futures, "topics"):
            self._start(ops.describe_topics, names, futures, opts)
        return futures

    def describe_cluster(self, *, include_authorized_operations: bool = False,
                         request_timeout: Optional[float] = None
                         ) -> Future[DescribeClusterResult]:
        """Describe the cluster: the future's result is a
        :class:`~kafka_client.admin.DescribeClusterResult`."""
        opts = self._options(request_timeout,
                             include_authorized_operations=_bool(
                                 include_authorized_operations,
                                 "include_authorized_operations"))
        future = self._keyed([None])[None]
        self._start(ops.describe_cluster, future, opts)
        return future

    # -- configs ---------------------------------------------------------------------------
    def describe_configs(self, resources: List[ConfigResource], *,
                         request_timeout: Optional[float] = None,
                         broker: Optional[int] = None
                         ) -> Dict[ConfigResource, Future[Dict[str, ConfigEntry]]]:
        """Describe resources' configurations. Returns ``{resource: future}``; each
        result is ``{name: ConfigEntry}``. BROKER resources go to that broker, the others
        to any broker (or ``broker``)."""
        self._check_resources(resources)
        opts = self._options(request_timeout, broker=_broker(broker))
        futures = self._keyed(resources)
        self._start(ops.describe_configs, list(futures), futures, opts)
        return futures

    def alter_configs(self, resources: List[ConfigResource], *,
                      request_timeout: Optional[float] = None, validate_only: bool = False,
                      broker: Optional[int] = None) -> Dict[ConfigResource, Future[None]]:
        """Replace resources' whole configurations with their ``set_config`` entries
        (entries left out go back to their defaults). Deprecated, as in confluent-kafka:
        use :meth:`incremental_alter_configs`. Each future's result is None."""
        warnings.warn("alter_configs has been deprecated. Use incremental_alter_configs "
                      "instead.", category=DeprecationWarning, stacklevel=2)
        self._check_resources(resources)
        for res in resources:
            for k in res.set_config_dict:
                if not isinstance(k, str):
                    raise TypeError(f"{res}: set_config names must be str")
        opts = self._options(request_timeout, validate_only=validate_only,
                             broker=_broker(broker))
        futures = self._keyed(resources)
        if not _duplicates(resources, futures, "ConfigResource"):
            self._start(ops.alter_configs, resources, futures, opts)
        return futures

    def incremental_alter_configs(self, resources: List[ConfigResource], *,
                                  request_timeout: Optional[float] = None,
                                  validate_only: bool = False,
                                  broker: Optional[int] = None
                                  ) -> Dict[ConfigResource, Future[None]]:
        """Apply each resource's ``incremental_configs`` (SET, DELETE, APPEND, SUBTRACT
        per :class:`~kafka_client.admin.ConfigEntry`); the rest stays as it is. Each
        future's result is None."""
        if isinstance(resources, (str, tuple, set)):
            # confluent-kafka reads each item first: one not a ConfigResource (a str's
            # characters) is a TypeError before the container's type is looked at
            for res in resources:
                if not isinstance(res, ConfigResource):
                    raise TypeError(f"Expected list of ConfigResource objects, not "
                                    f"{type(res).__name__}")
        _check_list(resources, "ConfigResource objects")
        for res in resources:   # a TypeError here, as confluent-kafka's
            if not isinstance(res, ConfigResource):
                raise TypeError(f"Expected list of ConfigResource objects, not "
                                f"{type(res).__name__}")
        self._check_resources(resources)
        for res in resources:
            if not res.incremental_configs:
                raise ValueError("expected non-empty list of ConfigEntry to alter "
                                 "incrementally in incremental_configs field")
            for i, e in enumerate(res.incremental_configs):
                if not isinstance(e, ConfigEntry):   # confluent-kafka's words
                    raise TypeError(f"expected ConfigEntry type in incremental_configs "
                                    f"field, index {i}")
                if not isinstance(e.incremental_operation, AlterConfigOpType):
                    raise TypeError(f"ConfigEntry {e.name!r}: incremental_operation must be "
                                    f"an AlterConfigOpType")
                if not isinstance(e.name, str) or not e.name:
                    raise TypeError("ConfigEntry name must be a non-empty str")
                if e.incremental_operation != AlterConfigOpType.DELETE \
                        and not isinstance(e.value, str):
                    raise TypeError(f"Expected .value to be str type, not "
                                    f"{type(e.value).__name__}")
        opts = self._options(request_timeout, validate_only=validate_only,
                             broker=_broker(broker))
        futures = self._keyed(resources)
        if _duplicates(resources, futures, "ConfigResource", "Duplicate ConfigResource found"):
            return futures
        for res in resources:
            names = [e.name for e in res.incremental_configs]
            if len(set(names)) != len(names):
                ops.settle(futures[res], error=client_error(KafkaError._INVALID_ARG,
                                                          "Duplicate ConfigEntry found"))
        todo = [r for r in resources if not futures[r].done()]
        if todo:
            self._start(ops.incremental_alter_configs, todo, futures, opts)
        return futures

    def _check_resources(self, resources: Any) -> None:
        _check_list(resources, "ConfigResource objects")
        _check_items(resources, ConfigResource, "ConfigResource objects")
        for res in resources:
            if not isinstance(res.name, str) or not res.name:
                raise ValueError(f"Invalid {res}: the resource name must be a non-empty str")

    # -- records and offsets ----------------------------------------------------------------
    def delete_records(self, topic_partition_offsets: List[TopicPartition], *,
                       request_timeout: Optional[float] = None,
                       operation_timeout: Optional[float] = None
                       ) -> Dict[TopicPartition, Future[DeletedRecords]]:
        """Delete the records before each partition's ``offset`` (OFFSET_END, -1: all of
        them). Returns ``{TopicPartition: future}``; each result is a
        :class:`~kafka_client.admin.DeletedRecords`."""
        _check_partition_list(topic_partition_offsets, "Request", "request",
                              "'partition' cannot be negative")
        opts = self._options(request_timeout, operation_timeout, wait_by_default=True)
        futures = self._keyed(topic_partition_offsets)
        keys = [(tp.topic, tp.partition) for tp in topic_partition_offsets]
        if futures and not _duplicates(keys, futures, "partitions"):
            offsets = {(tp.topic, tp.partition): tp.offset for tp in topic_partition_offsets}
            self._start(ops.delete_records, offsets, _by_key(futures), opts)
        return futures

    def list_offsets(self, topic_partition_offsets: Dict[TopicPartition, OffsetSpec], *,
                     isolation_level: Optional[IsolationLevel] = None,
                     request_timeout: Optional[float] = None
                     ) -> Dict[TopicPartition, Future[ListOffsetsResultInfo]]:
        """The earliest, latest, max-timestamp or by-timestamp offset of partitions.
        Returns ``{TopicPartition: future}`` (keys carry the spec's number as offset);
        each result is a :class:`~kafka_client.admin.ListOffsetsResultInfo`."""
        if not isinstance(topic_partition_offsets, dict):
            raise TypeError("Expected topic_partition_offsets to be dict of "
                            "[TopicPartitions,OffsetSpec] for list offsets request")
        for tp, spec in topic_partition_offsets.items():
            if tp is None:
                raise TypeError("partition cannot be None")
            if not isinstance(tp, TopicPartition):
                raise TypeError("partition must be a TopicPartition")
            if not tp.topic:
                raise ValueError("partition topic name cannot be empty")
            if tp.partition < 0:
                raise ValueError("partition index must be non-negative")
            if spec is None:
                raise TypeError("OffsetSpec cannot be None")
            if not isinstance(spec, OffsetSpec):
                raise TypeError("Value must be a OffsetSpec")
        if isolation_level is not None and not isinstance(isolation_level, IsolationLevel):
            raise TypeError("isolation_level argument should be an IsolationLevel")
        opts = self._options(request_timeout, isolation_level=(
            isolation_level if isolation_level is not None
            else IsolationLevel.READ_UNCOMMITTED).value)
        keyed = [TopicPartition(tp.topic, tp.partition, spec._value)
                 for tp, spec in topic_partition_offsets.items()]
        futures = self._keyed(keyed)
        bad = [tp for tp in keyed if tp.offset < -3]
        for tp in bad:
            ops.settle(futures[tp], error=client_error(
                KafkaError._INVALID_ARG,
                f"Partition {tp.partition} has an invalid offset {tp.offset}"))
        specs = {(tp.topic, tp.partition): tp.offset for tp in keyed if tp not in bad}
        if specs:
            self._start(ops.list_offsets, specs, _by_key(futures), opts)
        return futures

    # -- consumer groups ---------------------------------------------------------------------
    def list_consumer_groups(self, *, request_timeout: Optional[float] = None,
                             states: Optional[Set[ConsumerGroupState]] = None,
                             types: Optional[Set[ConsumerGroupType]] = None
                             ) -> Future[ListConsumerGroupsResult]:
        """List the consumer groups of every broker, optionally only those in ``states``
        or of ``types``. The result is a
        :class:`~kafka_client.admin.ListConsumerGroupsResult`."""
        for name, value, cls in (("states", states, ConsumerGroupState),
                                 ("types", types, ConsumerGroupType)):
            if value is None:
                continue
            if not isinstance(value, set):
                raise TypeError(f"'{name}' must be a set")
            for item in value:
                if not isinstance(item, cls):
                    raise TypeError(f"All elements of {name} must be of type {cls.__name__}")
        opts = self._options(request_timeout, states=states or None, types=types or None)
        future = self._keyed([None])[None]
        self._start(ops.list_consumer_groups, future, opts)
        return future

    def describe_consumer_groups(self, group_ids: List[str], *,
                                 include_authorized_operations: bool = False,
                                 request_timeout: Optional[float] = None
                                 ) -> Dict[str, Future[ConsumerGroupDescription]]:
        """Describe consumer groups (asked from each group's coordinator). Returns
        ``{group_id: future}``; each result is a
        :class:`~kafka_client.admin.ConsumerGroupDescription`."""
        self._check_groups(group_ids, "described")
        opts = self._options(request_timeout,
                             include_authorized_operations=_bool(
                                 include_authorized_operations,
                                 "include_authorized_operations"))
        futures = self._keyed(group_ids)
        if not _duplicates(group_ids, futures, "groups"):
            self._start(ops.describe_consumer_groups, group_ids, futures, opts)
        return futures

    def delete_consumer_groups(self, group_ids: List[str], *,
                               request_timeout: Optional[float] = None
                               ) -> Dict[str, Future[None]]:
        """Delete consumer groups (empty ones: a group with members fails with
        NON_EMPTY_GROUP). Returns ``{group_id: future}``; each result is None."""
        self._check_groups(group_ids, "deleted")
        opts = self._options(request_timeout)
        futures = self._keyed(group_ids)
        if not _duplicates(group_ids, futures, "groups"):
            self._start(ops.delete_consumer_groups, group_ids, futures, opts)
        return futures

    @staticmethod
    def _check_groups(group_ids: Any, verb: str) -> None:
        if not isinstance(group_ids, list):
            raise TypeError(f"Expected input to be list of group ids to be {verb}")
        if not group_ids:
            raise ValueError(f"Expected at least one group to be {verb}")
        for g in group_ids:
            if not isinstance(g, str):
                raise ValueError(f"Expected list of group strings, not {type(g).__name__}")

    def list_consumer_group_offsets(self, list_consumer_group_offsets_request:
                                    List[ConsumerGroupTopicPartitions], *,
                                    require_stable: bool = False,
                                    request_timeout: Optional[float] = None
                                    ) -> Dict[str, Future[ConsumerGroupTopicPartitions]]:
        """The committed offsets of one group (of its listed partitions, or of all).
        Returns ``{group_id: future}``; the result is a
        :class:`~kafka_client.ConsumerGroupTopicPartitions` whose partitions carry the
        offset (OFFSET_INVALID when none is committed), metadata and error."""
        request = _check_group_request(list_consumer_group_offsets_request, "listing",
                                       altering=False)
        opts = self._options(request_timeout,
                             require_stable=_bool(require_stable, "require_stable"))
        futures = self._keyed([request.group_id])
        if not self._duplicate_partitions(request, futures):
            self._start(ops.list_consumer_group_offsets, request, futures[request.group_id],
                        opts)
        return futures

    def alter_consumer_group_offsets(self, alter_consumer_group_offsets_request:
                                     List[ConsumerGroupTopicPartitions], *,
                                     request_timeout: Optional[float] = None
                                     ) -> Dict[str, Future[ConsumerGroupTopicPartitions]]:
        """Commit offsets for a group that has no active members. Returns ``{group_id:
        future}``; the result is a :class:`~kafka_client.ConsumerGroupTopicPartitions`
        whose partitions carry their own error (or None)."""
        request = _check_group_request(alter_consumer_group_offsets_request, "altering",
                                       altering=True)
        opts = self._options(request_timeout)
        futures = self._keyed([request.group_id])
        if not self._duplicate_partitions(request, futures):
            self._start(ops.alter_consumer_group_offsets, request, futures[request.group_id],
                        opts)
        return futures

    @staticmethod
    def _duplicate_partitions(request: ConsumerGroupTopicPartitions,
                              futures: Dict[str, Future]) -> bool:
        keys = [(tp.topic, tp.partition) for tp in request.topic_partitions or ()]
        return _duplicates(keys, futures, "partitions")

    # -- share groups (KIP-932) ----------------------------------------------------------------
    def describe_share_groups(self, group_ids: List[str], *,
                              include_authorized_operations: bool = False,
                              request_timeout: Optional[float] = None
                              ) -> Dict[str, Future[ShareGroupDescription]]:
        """Describe share groups (ShareGroupDescribe to each group's coordinator). Returns
        ``{group_id: future}``; each result is a
        :class:`~kafka_client.admin.ShareGroupDescription`; a group id that is no share
        group fails with GROUP_ID_NOT_FOUND. List share groups with
        ``list_consumer_groups(types={ConsumerGroupType.SHARE})``."""
        self._check_groups(group_ids, "described")
        opts = self._options(request_timeout,
                             include_authorized_operations=_bool(
                                 include_authorized_operations,
                                 "include_authorized_operations"))
        futures = self._keyed(group_ids)
        if not _duplicates(group_ids, futures, "groups"):
            self._start(ops.describe_share_groups, group_ids, futures, opts)
        return futures

    def delete_share_groups(self, group_ids: List[str], *,
                            request_timeout: Optional[float] = None
                            ) -> Dict[str, Future[None]]:
        """Delete share groups and their share-partition state (empty ones: a group with
        members fails with NON_EMPTY_GROUP). Returns ``{group_id: future}``; each result
        is None."""
        self._check_groups(group_ids, "deleted")
        opts = self._options(request_timeout)
        futures = self._keyed(group_ids)
        if not _duplicates(group_ids, futures, "groups"):
            # DeleteGroups, as for consumer groups: the coordinator deletes either kind.
            self._start(ops.delete_consumer_groups, group_ids, futures, opts)
        return futures

    def list_share_group_offsets(self, list_share_group_offsets_request:
                                 List[ConsumerGroupTopicPartitions], *,
                                 request_timeout: Optional[float] = None
                                 ) -> Dict[str, Future[ConsumerGroupTopicPartitions]]:
        """The start offsets of share groups' share-partitions (the first offset not yet
        done with), for each group's listed partitions or all it has read
        (``topic_partitions=None``). Returns ``{group_id: future}``; the result is a
        :class:`~kafka_client.ConsumerGroupTopicPartitions` whose partitions carry the
        start offset (OFFSET_INVALID where no member has read the partition yet), the
        leader epoch and their own error."""
        requests = _check_list(list_share_group_offsets_request,
                               "ConsumerGroupTopicPartitions")
        for request in requests:
            _check_group_partitions(request, altering=False)
        group_ids = [r.group_id for r in requests]
        opts = self._options(request_timeout)
        futures = self._keyed(group_ids)
        if not _duplicates(group_ids, futures, "groups") and not any(
                self._duplicate_partitions(r, futures) for r in requests):
            self._start(ops.list_share_group_offsets, requests, futures, opts)
        return futures

    def alter_share_group_offsets(self, alter_share_group_offsets_request:
                                  List[ConsumerGroupTopicPartitions], *,
                                  request_timeout: Optional[float] = None
                                  ) -> Dict[str, Future[ConsumerGroupTopicPartitions]]:
        """Set the start offsets of a share group's share-partitions: the group must have
        no members (NON_EMPTY_GROUP otherwise); its next member reads from there. Returns
        ``{group_id: future}``; the result is a
        :class:`~kafka_client.ConsumerGroupTopicPartitions` whose partitions carry their
        own error (or None)."""
        request = _check_group_request(alter_share_group_offsets_request, "altering",
                                       altering=True)
        opts = self._options(request_timeout)
        futures = self._keyed([request.group_id])
        if not self._duplicate_partitions(request, futures):
            self._start(ops.alter_share_group_offsets, request, futures[request.group_id],
                        opts)
        return futures

    def delete_share_group_offsets(self, group_id: str, topics: List[str], *,
                                   request_timeout: Optional[float] = None
                                   ) -> Dict[str, Future[None]]:
        """Delete a share group's share-partition state of whole topics: the group must
        have no members (NON_EMPTY_GROUP otherwise); its next member starts those topics
        afresh (``share.auto.offset.reset``). Returns ``{topic: future}``; each result is
        None."""
        if not isinstance(group_id, str):
            raise TypeError(f"'group_id' must be a string, not {type(group_id).__name__}")
        if not group_id:
            raise ValueError("'group_id' cannot be empty")
        _check_list(topics, "topic names")
        for t in topics:
            if not isinstance(t, str):
                raise TypeError(f"Expected list of topic names, not {type(t).__name__}")
            if not t:
                raise ValueError("Topic name cannot be empty")
        opts = self._options(request_timeout)
        futures = self._keyed(topics)
        if not _duplicates(topics, futures, "topics"):
            self._start(ops.delete_share_group_offsets, group_id, topics, futures, opts)
        return futures

    def list_groups(self, group: Optional[str] = None,
                    timeout: Optional[float] = -1) -> List[GroupMetadata]:
        """Deprecated (as in confluent-kafka): use :meth:`list_consumer_groups` and
        :meth:`describe_consumer_groups`. Every group of the cluster (or only ``group``)
        with its coordinator, state, protocol and members, from ListGroups and
        DescribeGroups to every broker; waits at most ``timeout`` seconds (-1 or None:
        ``socket.timeout.ms``). Raises KafkaException when a broker could not be asked
        (_PARTIAL if others could) or the time ran out."""
        warnings.warn("list_groups() is deprecated, use list_consumer_groups() and "
                      "describe_consumer_groups() instead.", DeprecationWarning, stacklevel=2)
        if group is not None and not isinstance(group, str):
            raise TypeError(f"argument 1 must be str or None, not {type(group).__name__}")
        self._check_handle_open()
        wait = wait_limit(timeout)
        opts = self._options(wait if wait is None else min(wait, _MAX_TIMEOUT))
        future = self._keyed([None])[None]
        self._start(ops.list_groups, group, future, opts)
        try:
            return future.result(None if wait is None else wait + 1.0)
        except concurrent.futures.TimeoutError:  # the call's own deadline comes first
            raise KafkaException(client_error(KafkaError._TIMED_OUT,
                                              "Failed to list groups: timed out")) from None

    # -- SCRAM credentials -------------------------------------------------------------------
    @overload
    def describe_user_scram_credentials(
            self, users: None = None, *, request_timeout: Optional[float] = None
    ) -> Future[Dict[str, UserScramCredentialsDescription]]: ...

    @overload
    def describe_user_scram_credentials(
            self, users: List[str], *, request_timeout: Optional[float] = None
    ) -> Dict[str, Future[UserScramCredentialsDescription]]: ...

    def describe_user_scram_credentials(
            self, users: Optional[List[str]] = None, *, request_timeout: Optional[float] = None
    ) -> Union[Future[Dict[str, UserScramCredentialsDescription]],
               Dict[str, Future[UserScramCredentialsDescription]]]:
        """The SASL/SCRAM credentials (mechanisms and iteration counts) of ``users``:
        ``{user: future}``, each result a
        :class:`~kafka_client.admin.UserScramCredentialsDescription` (a user without
        credentials fails with RESOURCE_NOT_FOUND). ``users=None``: every user, one
        future whose result is ``{user: UserScramCredentialsDescription}``."""
        if users is not None:
            if not isinstance(users, list):
                raise TypeError("Expected input to be list of String")
            for user in users:
                if user is None:
                    raise TypeError("'user' cannot be None")
                if not isinstance(user, str):
                    raise TypeError("Each value should be a string")
                if not user:
                    raise ValueError("'user' cannot be empty")
        opts = self._options(request_timeout)
        if users is None:
            futures: Dict[Optional[str], Future] = self._keyed([None])
        else:
            futures = self._keyed(users)  # type: ignore[arg-type]
            if not users or _duplicates(users, futures, "users", "Duplicate users aren't "
                                        "allowed in the same request"):
                return futures  # type: ignore[return-value]
        self._start(ops.describe_user_scram_credentials, users, futures, opts)
        return futures[None] if users is None else futures  # type: ignore[return-value]

    def alter_user_scram_credentials(self, alterations: List[UserScramCredentialAlteration],
                                     *, request_timeout: Optional[float] = None
                                     ) -> Dict[str, Future[None]]:
        """Upsert or delete SASL/SCRAM credentials. Returns ``{user: future}``; each
        result is None. An upsertion's password is salted here (PBKDF2 with the
        mechanism's HMAC, RFC 5802; a random salt when it has none): only the salt and
        the salted password are sent."""
        if not isinstance(alterations, list):
            raise TypeError("Expected input to be list")
        if not alterations:
            raise ValueError("Expected at least one alteration")
        for a in alterations:
            _check_scram_alteration(a)
        opts = self._options(request_timeout)
        futures = self._keyed(list(dict.fromkeys(a.user for a in alterations)))
        unknown = next((i for i, a in enumerate(alterations)
                        if _scram_mechanism(a) is ScramMechanism.UNKNOWN), None)
        if unknown is not None:
            for fut in futures.values():
                ops.settle(fut, error=client_error(
                    KafkaError._INVALID_ARG,
                    f"SCRAM mechanism must be specified at index {unknown}"))
            return futures
        deletions = [(a.user, a.mechanism.value) for a in alterations
                     if isinstance(a, UserScramCredentialDeletion)]
        upsertions = []
        for a in alterations:
            if isinstance(a, UserScramCredentialUpsertion):
                salt, salted = salted_password(a)
                info = a.scram_credential_info
                upsertions.append(ops.ScramUpsert(a.user, info.mechanism, info.iterations,
                                                  salt, salted))
        self._start(ops.alter_user_scram_credentials, deletions, upsertions, futures, opts)
        return futures

    # -- leaders -----------------------------------------------------------------------------
    def elect_leaders(self, election_type: ElectionType,
                      partitions: Optional[List[TopicPartition]] = None, *,
                      operation_timeout: Optional[float] = None,
                      request_timeout: Optional[float] = None
                      ) -> Future[Dict[TopicPartition, Optional[KafkaError]]]:
        """Elect the preferred replica (``ElectionType.PREFERRED``) or, when no in-sync
        replica is left, any live one (``ElectionType.UNCLEAN``) as the leader of
        ``partitions`` (None: every partition). The future's result is
        ``{TopicPartition: None or KafkaError}`` (ELECTION_NOT_NEEDED where the
        preferred replica leads already). ``operation_timeout`` defaults to the request
        timeout, as in confluent-kafka."""
        if not isinstance(election_type, ElectionType):
            raise TypeError("Expected 'election_type' to be of type 'ElectionType'")
        if partitions is not None:
            _check_partition_list(partitions, "'partitions'", "'partitions'",
                                  "Elements of the 'partitions' list must not have negative "
                                  "value for 'partition' field")
        opts = self._options(request_timeout, operation_timeout, wait_by_default=True)
        future = self._keyed([None])[None]
        keys = None if partitions is None else [(tp.topic, tp.partition) for tp in partitions]
        if keys is not None and len(set(keys)) != len(keys):
            ops.settle(future, error=client_error(KafkaError._INVALID_ARG,
                                                  "Duplicate partitions specified"))
            return future
        self._start(ops.elect_leaders, election_type.value, keys, future, opts)
        return future

    # -- ACLs --------------------------------------------------------------------------------
    def create_acls(self, acls: List[AclBinding], *,
                    request_timeout: Optional[float] = None
                    ) -> Dict[AclBinding, Future[None]]:
        """Create ACL bindings. Returns ``{binding: future}``; each result is None."""
        _check_list(acls, "AclBinding objects", sized=True)
        if len(set(acls)) != len(acls):
            raise ValueError("duplicate ACL bindings not allowed")
        for a in acls:
            if not isinstance(a, AclBinding) or isinstance(a, AclBindingFilter):
                raise ValueError(f"Expected list of AclBinding objects, not "
                                 f"{type(a).__name__}")
        opts = self._options(request_timeout)
        futures = self._keyed(acls)
        self._start(ops.create_acls, acls, futures, opts)
        return futures

    def describe_acls(self, acl_binding_filter: AclBindingFilter, *,
                      request_timeout: Optional[float] = None) -> Future[List[AclBinding]]:
        """The ACL bindings matching a filter: the future's result is a list of
        :class:`~kafka_client.admin.AclBinding`."""
        if not isinstance(acl_binding_filter, AclBindingFilter):
            raise TypeError("Expected an AclBindingFilter object")
        opts = self._options(request_timeout)
        future = self._keyed([None])[None]
        self._start(ops.describe_acls, acl_binding_filter, future, opts)
        return future

    def delete_acls(self, acl_binding_filters: List[AclBindingFilter], *,
                    request_timeout: Optional[float] = None
                    ) -> Dict[AclBindingFilter, Future[List[AclBinding]]]:
        """Delete the ACL bindings matching each filter. Returns ``{filter: future}``;
        each result is the list of :class:`~kafka_client.admin.AclBinding` deleted."""
        _check_list(acl_binding_filters, "AclBindingFilter objects", sized=True)
        if len(set(acl_binding_filters)) != len(acl_binding_filters):
            raise ValueError("duplicate ACL binding filters not allowed")
        _check_items(acl_binding_filters, AclBindingFilter, "AclBindingFilter objects")
        opts = self._options(request_timeout)
        futures = self._keyed(acl_binding_filters)
        self._start(ops.delete_acls, acl_binding_filters, futures, opts)
        return futures

    # -- events and lifetime ----------------------------------------------------------------
    def poll(self, timeout: float = -1) -> int:
        """Serve ``error_cb`` with the client-level errors (lost connections, ...) that
        happened, and ``stats_cb`` every ``statistics.interval.ms``; waits up to
        ``timeout`` seconds for one (-1: until one comes). Returns how many were served.
        Futures complete without it."""
        self._check_open()
        limit = wait_limit(timeout)
        deadline = None if limit is None else time.monotonic() + limit
        while True:
            n = self._serve_client_events()
            if n or (deadline is not None and time.monotonic() >= deadline) \
                    or self._closed:   # closed by another thread meanwhile
                return n
            time.sleep(0.05 if deadline is None else
                       max(0.0, min(0.05, deadline - time.monotonic())))

    def __len__(self) -> int:
        """Futures of this client not completed yet."""
        with self._lock:
            return len(self._outstanding)

    def close(self) -> None:
        """Stop the client: operations still running fail with _DESTROY, connections
        close, the I/O thread ends. Later calls raise RuntimeError."""
        if self._closed:
            if self._forked:
                self._refuse()
            return
        self._shutdown()
        # Whatever was still running (waiting for a broker, a lookup or an answer) ends.
        with self._lock:
            left = list(self._outstanding)
        for fut in left:
            ops.settle(fut, error=client_error(KafkaError._DESTROY, "AdminClient closed"))


# --------------------------------------------------------------------------- input checks


def _timeout(value: Any, what: str, low: float, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, not {type(value).__name__}")
    if value == -1 and low == 0.0:
        return default  # confluent-kafka's "use the default"
    if not low <= value <= _MAX_TIMEOUT:
        raise ValueError(f'Invalid value for "{what}": expecting a number of seconds in '
                         f"range {low:g}..{_MAX_TIMEOUT:g}")
    return float(value)


def _bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"Expected {what} to be bool type, not {type(value).__name__}")
    return value


def _broker(value: Any) -> Optional[int]:
    if value is None or value == -1:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"broker must be an int broker id, not {type(value).__name__}")
    return value


def _check_assignment(assignment: Any, count: Optional[int], what: str) -> None:
    if not isinstance(assignment, list) or not all(
            isinstance(ids, list) and ids and all(isinstance(i, int) for i in ids)
            for ids in assignment) or (count is not None and len(assignment) != count):
        raise ValueError(f"Invalid {what}: replica_assignment must be a list of non-empty "
                         f"lists of broker ids, one per partition")


def _check_new_topic(t: NewTopic) -> None:
    what = f"NewTopic({t.topic})"
    # 0 passes here, as in librdkafka; its future fails with INVALID_PARTITIONS.
    if t.num_partitions != -1 and not 0 <= t.num_partitions <= _MAX_PARTITIONS:
        raise ValueError(f"Invalid {what}: num_partitions {t.num_partitions} is out of the "
                         f"expected range 1..{_MAX_PARTITIONS} or -1 for broker default")
    if t.replication_factor != -1 and not 0 <= t.replication_factor <= _MAX_REPLICATION:
        raise ValueError(f"Invalid {what}: replication_factor {t.replication_factor} is out "
                         f"of the expected range 1..{_MAX_REPLICATION} or -1 for broker "
                         f"default")
    if t.replica_assignment is not None:
        if t.replication_factor != -1:
            raise ValueError(f"Invalid {what}: replication_factor and replica_assignment "
                             f"are mutually exclusive")
        _check_assignment(t.replica_assignment,
                          None if t.num_partitions == -1 else t.num_partitions, what)
    if t.config is not None:
        if not isinstance(t.config, dict):
            raise TypeError(f"Invalid {what}: config must be a dict, not "
                            f"{type(t.config).__name__}")
        for k in t.config:
            if not isinstance(k, str) or not k:
                raise TypeError(f"Invalid {what}: config names must be non-empty str, not "
                                f"{k!r}")


def _check_group_request(request: Any, doing: str, altering: bool
                         ) -> ConsumerGroupTopicPartitions:
    if request is None:
        raise TypeError("request cannot be None")
    if not isinstance(request, list):
        raise TypeError("request must be a list")
    if len(request) != 1:
        raise ValueError(f"Currently we support {doing} offsets for a single consumer group "
                         f"only")
    return _check_group_partitions(request[0], altering)


def _check_group_partitions(req: Any, altering: bool) -> ConsumerGroupTopicPartitions:
    """One group's partitions of an offsets request (``altering``: with the offsets to
    set)."""
    if not isinstance(req, ConsumerGroupTopicPartitions):
        raise TypeError("Expected list of 'ConsumerGroupTopicPartitions'")
    if req.group_id is None:
        raise TypeError("'group_id' cannot be None")
    if not isinstance(req.group_id, str):
        raise TypeError("'group_id' must be a string")
    if not req.group_id:
        raise ValueError("'group_id' cannot be empty")
    parts = req.topic_partitions
    if parts is None:
        if altering:
            raise ValueError("'topic_partitions' cannot be null")
        return req
    if not isinstance(parts, list):
        raise TypeError("'topic_partitions' must be a list" + ("" if altering else " or None"))
    if not parts:
        raise ValueError("'topic_partitions' cannot be empty")
    for tp in parts:
        _check_partition(tp, "topic_partitions")
        if altering and tp.offset < 0:
            raise ValueError("Element of 'topic_partitions' must not have negative value "
                             "for 'offset' field")
        if not altering and tp.offset != OFFSET_INVALID:
            raise ValueError("Element of 'topic_partitions' must not have 'offset' value")
    return req


def _by_key(futures: Dict[TopicPartition, Future]) -> Dict[PartitionKey, Future]:
    return {(tp.topic, tp.partition): fut for tp, fut in futures.items()}


def _check_scram_alteration(a: Any) -> None:
    if not isinstance(a, UserScramCredentialAlteration):
        raise TypeError("Expected each element of list to be subclass of "
                        "UserScramCredentialAlteration")
    if a.user is None:
        raise TypeError("'user' cannot be None")
    if not isinstance(a.user, str):
        raise TypeError("'user' must be a string")
    if not a.user:
        raise ValueError("'user' cannot be empty")
    if isinstance(a, UserScramCredentialUpsertion):
        if a.password is None:
            raise TypeError("'password' cannot be None")
        if not isinstance(a.password, bytes):
            raise TypeError("'password' must be bytes")
        if not a.password:
            raise ValueError("'password' cannot be empty")
        if a.salt is not None:
            if not isinstance(a.salt, bytes):
                raise TypeError("'salt' must be bytes")
            if not a.salt:
                raise ValueError("'salt' can be None but cannot be empty")
        info = a.scram_credential_info
        if not isinstance(info, ScramCredentialInfo):
            raise TypeError("Expected credential_info to be ScramCredentialInfo Type")
        if isinstance(info.iterations, bool) or not isinstance(info.iterations, int):
            raise TypeError("'iterations' must be an int")
        if info.iterations < 1:
            raise ValueError("Iterations should be positive")
        if not isinstance(info.mechanism, ScramMechanism):
            raise TypeError("Expected the mechanism to be ScramMechanism Type")
    elif isinstance(a, UserScramCredentialDeletion):
        if not isinstance(a.mechanism, ScramMechanism):
            raise TypeError("Expected the mechanism to be ScramMechanism Type")
    else:
        raise TypeError("Expected each element of list 'alterations' to be either a "
                        "UserScramCredentialUpsertion or a UserScramCredentialDeletion")


def _scram_mechanism(a: UserScramCredentialAlteration) -> ScramMechanism:
    if isinstance(a, UserScramCredentialUpsertion):
        return a.scram_credential_info.mechanism
    return a.mechanism  # type: ignore[attr-defined]
