"""A ShareConsumer that deserializes keys and values itself (confluent-kafka's
DeserializingShareConsumer)."""
from __future__ import annotations

from typing import Any, Dict, Optional

from ._model import Messages
from ._serde_builders import ClientSerdes
from .consumer.share_consumer import ShareConsumer
from .errors import KafkaError
from .serialization import MessageField, SerializationContext
from .types import Message

__all__ = ["DeserializingShareConsumer"]


class DeserializingShareConsumer(ShareConsumer):
    """A :class:`~kafka_client.ShareConsumer` whose configuration may also hold
    ``key.deserializer`` and ``value.deserializer`` (callables ``(bytes or None, ctx) ->
    object``) or their ``.builder`` forms, applied in place to each message of
    :meth:`poll`. A record whose key or value cannot be deserialized stays in the batch
    with its raw bytes and ``error()`` set to ``_KEY_DESERIALIZATION`` or
    ``_VALUE_DESERIALIZATION`` (nothing is raised), so it can still be acknowledged
    (REJECT, say)."""

    def __init__(self, conf: Dict[str, Any]) -> None:
        self._serdes = ClientSerdes(conf, "deserializer")
        self._serdes.start_client(super().__init__, self.cluster_id)

    def close(self) -> None:
        """ShareConsumer.close(), then close the deserializers it built from builders."""
        super().close()
        self._serdes.close()

    def poll(self, timeout: Optional[float] = -1) -> Messages:
        """ShareConsumer.poll() with each message's key and value deserialized in place
        (error events are left as they are)."""
        messages = super().poll(timeout)
        for msg in messages:
            if msg.error() is None:
                self._deserialize(msg)
        return messages

    def _deserialize(self, msg: Message) -> None:
        # The key first (a key deserializer may leave state for the value's), both set
        # only once both succeeded: a failed record keeps its raw bytes.
        ctx = SerializationContext(msg.topic(), MessageField.KEY, msg.headers())
        key, value = msg.key(), msg.value()
        try:
            if self._serdes.key is not None:
                key = self._serdes.key(key, ctx)
        except Exception as exc:
            msg.set_error(KafkaError(KafkaError._KEY_DESERIALIZATION, str(exc)))
            return
        try:
            if self._serdes.value is not None:
                ctx.field = MessageField.VALUE
                value = self._serdes.value(value, ctx)
        except Exception as exc:
            msg.set_error(KafkaError(KafkaError._VALUE_DESERIALIZATION, str(exc)))
            return
        msg.set_key(key)
        msg.set_value(value)
