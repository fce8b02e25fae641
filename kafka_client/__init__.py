"""kafka_client: a Kafka client on top of kafka_proto.

The public names mirror confluent-kafka-python's, at the same module paths
(``kafka_client.error``, ``kafka_client.serialization``), so code can move over by changing
its imports; docs/migrating.md lists every name and each difference.
"""
import sys as _sys
import typing as _typing

from . import errors
from ._compat import _VERSION as __version__
from ._compat import consistent, fnv1a, libversion, murmur2, version
from ._model import (
    AcknowledgeType,
    Messages,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    ElectionType,
    IsolationLevel,
    Node,
    ThrottleEvent,
    TopicCollection,
    TopicPartitionInfo,
    Uuid,
)
from .errors import (
    ConcurrentModificationException,
    IllegalStateException,
    KafkaError,
    KafkaException,
)
from .types import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    OFFSET_STORED,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE,
    Message,
    TopicPartition,
)

# confluent-kafka's module is `error`; ours is `errors`. One module object under both names.
error = errors
_sys.modules[__name__ + ".error"] = errors

__all__ = [
    "ClientConfig",
    "Producer",
    "Consumer",
    "ShareConsumer",
    "AdminClient",
    "SerializingProducer",
    "DeserializingConsumer",
    "DeserializingShareConsumer",
    "OFFSET_TAIL",
    "KafkaError",
    "KafkaException",
    "ConcurrentModificationException",
    "IllegalStateException",
    "Message",
    "Messages",
    "AcknowledgeType",
    "TopicPartition",
    "OFFSET_BEGINNING",
    "OFFSET_END",
    "OFFSET_INVALID",
    "OFFSET_STORED",
    "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_LOG_APPEND_TIME",
    "TIMESTAMP_NOT_AVAILABLE",
    "ConsumerGroupState",
    "ConsumerGroupTopicPartitions",
    "ConsumerGroupType",
    "ElectionType",
    "IsolationLevel",
    "Node",
    "ThrottleEvent",
    "TopicCollection",
    "TopicPartitionInfo",
    "Uuid",
    "murmur2",
    "fnv1a",
    "consistent",
    "version",
    "libversion",
    "error",
    "serialization",
    "admin",
]

# Lazy (PEP 562), so that `python -m kafka_client.config` runs cleanly and importing the
# package does not load the producer and consumer.
_LAZY = {
    "ClientConfig": (".config", "ClientConfig"),
    "Producer": (".producer.producer", "Producer"),
    "Consumer": (".consumer.consumer", "Consumer"),
    "ShareConsumer": (".consumer.share_consumer", "ShareConsumer"),
    "AdminClient": (".admin", "AdminClient"),
    "OFFSET_TAIL": (".consumer.consumer", "OFFSET_TAIL"),
    "SerializingProducer": (".serializing_producer", "SerializingProducer"),
    "DeserializingConsumer": (".deserializing_consumer", "DeserializingConsumer"),
    "DeserializingShareConsumer": (".deserializing_share_consumer",
                                   "DeserializingShareConsumer"),
}

if _typing.TYPE_CHECKING:
    # The lazy names' real types for type checkers (they cannot follow __getattr__, and a
    # user's `from kafka_client import Producer` would otherwise be Any).
    from . import admin, serialization
    from .admin import AdminClient
    from .config import ClientConfig
    from .consumer.consumer import OFFSET_TAIL, Consumer
    from .consumer.share_consumer import ShareConsumer
    from .deserializing_consumer import DeserializingConsumer
    from .deserializing_share_consumer import DeserializingShareConsumer
    from .producer.producer import Producer
    from .serializing_producer import SerializingProducer

# Submodules confluent-kafka's top level exposes as attributes.
_SUBMODULES = ("serialization", "serializing_producer", "deserializing_consumer",
               "deserializing_share_consumer", "admin")


# Hidden from type checkers: with every lazy name imported above for them, a misspelt
# name is then an error for a user's checker instead of an Any from __getattr__.
if not _typing.TYPE_CHECKING:
    def __getattr__(name: str):
        import importlib

        if name in _SUBMODULES:
            return importlib.import_module("." + name, __name__)
        where = _LAZY.get(name)
        if where is None:
            raise AttributeError(f"module 'kafka_client' has no attribute {name!r}")
        value = getattr(importlib.import_module(where[0], __name__), where[1])
        globals()[name] = value
        return value


def __dir__():
    # The lazy names too, as on confluent_kafka: dir() and completion list what exists.
    return sorted(set(globals()) | set(__all__) | set(_SUBMODULES))
