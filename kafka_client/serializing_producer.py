"""A Producer that serializes keys and values itself (confluent-kafka's SerializingProducer)."""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional

from ._serde_builders import ClientSerdes
from .errors import KeySerializationError, ValueSerializationError
from .producer.producer import OnDelivery, Producer
from .serialization import MessageField, SerializationContext

__all__ = ["SerializingProducer"]


class SerializingProducer(Producer):
    """A :class:`~kafka_client.Producer` whose configuration may also hold
    ``key.serializer`` and ``value.serializer``: callables ``(obj, ctx) -> bytes or None``
    (see :mod:`kafka_client.serialization`) applied in :meth:`produce`, or
    ``key.serializer.builder``/``value.serializer.builder``: objects whose
    ``build(conf, is_key)`` makes one (confluent-kafka's Schema Registry builders), which
    the producer then owns and closes."""

    def __init__(self, conf: Dict[str, Any]) -> None:
        self._serdes = ClientSerdes(conf, "serializer")
        self._serdes.start_client(super().__init__, self.cluster_id)
        # What this class's produce() queues with after serializing: Producer's fast path
        # (which Producer does not bind over an overriding produce()). (close() binds a
        # closed-client stub per instance, which then rightly wins.)
        self._queue_message: Callable = self._acc.produce

    def close(self, timeout: Optional[float] = None) -> bool:
        """Producer.close(), then close the serializers built from
        ``key.serializer.builder``/``value.serializer.builder`` (ready-made ones are left
        to the application). If the producer's close raises, they are kept for the next
        call."""
        closed = super().close(timeout)
        self._serdes.close()
        return closed

    def produce(self, topic: str, key: Any = None, value: Any = None, partition: int = -1,  # type: ignore[override]
                on_delivery: Optional[OnDelivery] = None, timestamp: int = 0,
                headers: Any = None) -> None:
        """Serialize ``key`` and ``value`` (KeySerializationError / ValueSerializationError
        if a serializer raises; nothing is queued then) and queue the message. Note the
        argument order: ``key`` comes before ``value`` here, as in confluent-kafka."""
        if not isinstance(topic, str):
            # Before the serializers: they may register schemas (confluent-kafka's order)
            raise TypeError(f"topic must be a str, not {type(topic).__name__}")
        ctx = SerializationContext(topic, MessageField.KEY, headers)
        if self._serdes.key is not None:
            try:
                key = self._serdes.key(key, ctx)
            except Exception as e:
                raise KeySerializationError(e) from e
        if self._serdes.value is not None:
            ctx.field = MessageField.VALUE
            try:
                value = self._serdes.value(value, ctx)
            except Exception as e:
                raise ValueSerializationError(e) from e
        self._queue_message(topic, value, key, partition, on_delivery, timestamp, headers)
