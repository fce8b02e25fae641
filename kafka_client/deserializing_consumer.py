"""A Consumer that deserializes keys and values itself (confluent-kafka's
DeserializingConsumer)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from ._serde_builders import ClientSerdes
from .consumer.consumer import Consumer
from .errors import ConsumeError, KeyDeserializationError, ValueDeserializationError
from .serialization import MessageField, SerializationContext
from .types import Message

__all__ = ["DeserializingConsumer"]


class DeserializingConsumer(Consumer):
    """A :class:`~kafka_client.Consumer` whose configuration may also hold
    ``key.deserializer`` and ``value.deserializer``: callables ``(bytes or None, ctx) ->
    object`` (see :mod:`kafka_client.serialization`) applied in :meth:`poll`, or
    ``key.deserializer.builder``/``value.deserializer.builder``: objects whose
    ``build(conf, is_key)`` makes one (confluent-kafka's Schema Registry builders), which
    the consumer then owns and closes."""

    def __init__(self, conf: Dict[str, Any]) -> None:
        self._serdes = ClientSerdes(conf, "deserializer")
        self._serdes.start_client(super().__init__, self.cluster_id)

    def close(self) -> None:
        """Consumer.close(), then close the deserializers built from
        ``key.deserializer.builder``/``value.deserializer.builder`` (ready-made ones are
        left to the application). If the consumer's close raises, they are kept for the
        next call."""
        super().close()
        self._serdes.close()

    def poll(self, timeout: Optional[float] = -1) -> Optional[Message]:
        """The next message with its key and value deserialized, or None after ``timeout``
        seconds. An error or event (``msg.error()`` set, partition EOF included) raises
        :class:`~kafka_client.error.ConsumeError` carrying the message; a deserializer that
        raises gives Key/ValueDeserializationError."""
        # Consumer.poll() may be built on self.consume(), which this class refuses.
        batch = Consumer.consume(self, 1, -1 if timeout is None else timeout)
        if not batch:
            return None
        msg = batch[0]
        error = msg.error()
        if error is not None:
            raise ConsumeError(error, kafka_message=msg)
        # The key first (a key deserializer may leave state for the value's), and both
        # set only once both succeeded, as confluent-kafka: the message an error carries
        # keeps its raw bytes (a dead-letter handler produces it again as it came).
        topic = msg.topic()
        assert topic is not None    # a record (an error event raised above)
        ctx = SerializationContext(topic, MessageField.KEY, msg.headers())
        key, value = msg.key(), msg.value()
        if self._serdes.key is not None:
            try:
                key = self._serdes.key(key, ctx)
            except Exception as e:
                raise KeyDeserializationError(e, msg) from e
        if self._serdes.value is not None:
            ctx.field = MessageField.VALUE
            try:
                value = self._serdes.value(value, ctx)
            except Exception as e:
                raise ValueDeserializationError(e, msg) from e
        msg.set_key(key)
        msg.set_value(value)
        return msg

    def consume(self, num_messages: int = 1, timeout: Optional[float] = -1) -> List[Message]:
        """Not available on a deserializing consumer (as in confluent-kafka): use poll()."""
        raise NotImplementedError("DeserializingConsumer supports poll() only, not consume()")
