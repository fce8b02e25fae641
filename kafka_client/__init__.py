"""kafka_client: a Kafka client on top of kafka_proto (work in progress).

The public names mirror confluent-kafka-python's, so code can move over by changing an import.
"""
from .errors import KafkaError, KafkaException
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

__all__ = [
    "ClientConfig",
    "Producer",
    "Consumer",
    "OFFSET_TAIL",
    "KafkaError",
    "KafkaException",
    "Message",
    "TopicPartition",
    "OFFSET_BEGINNING",
    "OFFSET_END",
    "OFFSET_INVALID",
    "OFFSET_STORED",
    "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_LOG_APPEND_TIME",
    "TIMESTAMP_NOT_AVAILABLE",
]


def __getattr__(name: str):  # PEP 562: lazy, so `python -m kafka_client.config` runs cleanly
    if name == "ClientConfig":
        from .config import ClientConfig

        return ClientConfig
    if name == "Producer":
        from .producer.producer import Producer

        return Producer
    if name == "Consumer":
        from .consumer.consumer import Consumer

        return Consumer
    if name == "OFFSET_TAIL":
        from .consumer.consumer import OFFSET_TAIL

        return OFFSET_TAIL
    raise AttributeError(f"module 'kafka_client' has no attribute {name!r}")
