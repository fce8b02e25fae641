"""A Consumer that deserializes keys and values itself (confluent-kafka's
DeserializingConsumer)."""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional

from ._cluster_id_resolver import ClusterIdResolver, offer_resolver
from .consumer.consumer import Consumer
from .errors import ConsumeError, KeyDeserializationError, ValueDeserializationError
from .serialization import MessageField, SerializationContext
from .serializing_producer import _callable_or_none
from .types import Message

__all__ = ["DeserializingConsumer"]


class DeserializingConsumer(Consumer):
    """A :class:`~kafka_client.Consumer` whose configuration may also hold
    ``key.deserializer`` and ``value.deserializer``: callables ``(bytes or None, ctx) ->
    object`` (see :mod:`kafka_client.serialization`) applied in :meth:`poll`."""

    def __init__(self, conf: Dict[str, Any]) -> None:
        conf = dict(conf)
        self._key_deserializer: Optional[Callable] = _callable_or_none(conf, "key.deserializer")
        self._value_deserializer: Optional[Callable] = _callable_or_none(
            conf, "value.deserializer")
        super().__init__(conf)
        offer_resolver("set_cluster_id_resolver", ClusterIdResolver(self.cluster_id),
                       (self._key_deserializer, self._value_deserializer))

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
        ctx = SerializationContext(msg.topic(), MessageField.KEY, msg.headers())
        key, value = msg.key(), msg.value()
        if self._key_deserializer is not None:
            try:
                key = self._key_deserializer(key, ctx)
            except Exception as e:
                raise KeyDeserializationError(e, msg) from e
        if self._value_deserializer is not None:
            ctx.field = MessageField.VALUE
            try:
                value = self._value_deserializer(value, ctx)
            except Exception as e:
                raise ValueDeserializationError(e, msg) from e
        msg.set_key(key)
        msg.set_value(value)
        return msg

    def consume(self, num_messages: int = 1, timeout: Optional[float] = -1) -> List[Message]:
        """Not available on a deserializing consumer (as in confluent-kafka): use poll()."""
        raise NotImplementedError("DeserializingConsumer supports poll() only, not consume()")
