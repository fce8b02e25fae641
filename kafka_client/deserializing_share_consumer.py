"""A ShareConsumer that deserializes keys and values itself (confluent-kafka's
DeserializingShareConsumer)."""
from __future__ import annotations

from typing import Any, Dict, Tuple, Union

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
    :meth:`poll` (a KeyboardInterrupt in one puts the batch back for the next poll()).
    A record whose key or value cannot be deserialized stays in the batch
    with its raw bytes and ``error()`` set to ``_KEY_DESERIALIZATION`` or
    ``_VALUE_DESERIALIZATION`` (nothing is raised), so it can still be acknowledged
    (REJECT, say)."""

    def __init__(self, conf: Dict[str, Any]) -> None:
        self._serdes = ClientSerdes(conf, "deserializer")
        self._serdes.start_client(super().__init__, self.cluster_id)

    def close(self) -> None:
        """ShareConsumer.close(), then close the deserializers it built from builders
        (even when a callback close() served raised)."""
        try:
            super().close()
        finally:
            if self._closed and not self._forked:   # not when refused (a callback)
                self._serdes.close()

    def _prepare(self, messages: Messages) -> None:
        # Every message's key and value first, then all set: what a deserializer lets
        # through (KeyboardInterrupt: it is not an Exception) leaves the batch as it
        # came, put back whole for the next poll() (error events are left as they are)
        decoded = [self._deserialize(msg) if msg.error() is None else None
                   for msg in messages]
        for msg, fields in zip(messages, decoded):
            if isinstance(fields, KafkaError):
                msg.set_error(fields)
            elif fields is not None:
                msg.set_key(fields[0])
                msg.set_value(fields[1])

    def _deserialize(self, msg: Message) -> Union[Tuple[Any, Any], KafkaError]:
        """The message's key and value deserialized, the key first (a key deserializer
        may leave state for the value's), or the error that marks it (it keeps its raw
        bytes)."""
        topic = msg.topic()
        assert topic is not None    # a record: an error event is not deserialized
        ctx = SerializationContext(topic, MessageField.KEY, msg.headers())
        key, value = msg.key(), msg.value()
        try:
            if self._serdes.key is not None:
                key = self._serdes.key(key, ctx)
        except Exception as exc:
            return KafkaError(KafkaError._KEY_DESERIALIZATION, str(exc))
        try:
            if self._serdes.value is not None:
                ctx.field = MessageField.VALUE
                value = self._serdes.value(value, ctx)
        except Exception as exc:
            return KafkaError(KafkaError._VALUE_DESERIALIZATION, str(exc))
        return key, value
