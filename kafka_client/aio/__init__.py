"""The asyncio API, as confluent-kafka's ``confluent_kafka.aio``: :class:`AIOProducer`,
:class:`AIOConsumer`, and their serializing forms :class:`AsyncSerializingProducer` and
:class:`AsyncDeserializingConsumer`. Code written for confluent-kafka's asyncio API moves
over by changing ``confluent_kafka.aio`` to ``kafka_client.aio``; docs/asyncio.md has the
details and the differences."""
from kafka_client.aio._consumer import AIOConsumer
from kafka_client.aio.producer import AIOProducer
from kafka_client.aio._serializing import AsyncDeserializingConsumer, AsyncSerializingProducer

__all__ = ["AIOProducer", "AIOConsumer", "AsyncSerializingProducer",
           "AsyncDeserializingConsumer"]
