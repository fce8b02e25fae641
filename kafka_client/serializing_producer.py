"""A Producer that serializes keys and values itself (confluent-kafka's SerializingProducer)."""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional

from ._cluster_id_resolver import ClusterIdResolver, offer_resolver
from .errors import KeySerializationError, ValueSerializationError
from .producer.producer import Producer
from .serialization import MessageField, SerializationContext

__all__ = ["SerializingProducer"]


class SerializingProducer(Producer):
    """A :class:`~kafka_client.Producer` whose configuration may also hold
    ``key.serializer`` and ``value.serializer``: callables ``(obj, ctx) -> bytes or None``
    (see :mod:`kafka_client.serialization`) applied in :meth:`produce`."""

    def __init__(self, conf: Dict[str, Any]) -> None:
        conf = dict(conf)
        self._key_serializer: Optional[Callable] = _callable_or_none(conf, "key.serializer")
        self._value_serializer: Optional[Callable] = _callable_or_none(conf, "value.serializer")
        super().__init__(conf)
        # Producer binds its fast produce path per instance, which would hide this class's
        # produce(); take it over and call it after serializing. (close() binds a
        # closed-client stub the same way, which then rightly wins.)
        self._queue_message: Callable = self.__dict__.pop("produce")
        offer_resolver("set_cluster_id_resolver", ClusterIdResolver(self.cluster_id),
                       (self._key_serializer, self._value_serializer))

    def produce(self, topic: str, key: Any = None, value: Any = None, partition: int = -1,  # type: ignore[override]
                on_delivery: Optional[Callable] = None, timestamp: int = 0,
                headers: Any = None) -> None:
        """Serialize ``key`` and ``value`` (KeySerializationError / ValueSerializationError
        if a serializer raises; nothing is queued then) and queue the message. Note the
        argument order: ``key`` comes before ``value`` here, as in confluent-kafka."""
        if not isinstance(topic, str):
            # Before the serializers: they may register schemas (confluent-kafka's order)
            raise TypeError(f"topic must be a str, not {type(topic).__name__}")
        ctx = SerializationContext(topic, MessageField.KEY, headers)
        if self._key_serializer is not None:
            try:
                key = self._key_serializer(key, ctx)
            except Exception as e:
                raise KeySerializationError(e) from e
        if self._value_serializer is not None:
            ctx.field = MessageField.VALUE
            try:
                value = self._value_serializer(value, ctx)
            except Exception as e:
                raise ValueSerializationError(e) from e
        self._queue_message(topic, value, key, partition, on_delivery, timestamp, headers)


def _callable_or_none(conf: Dict[str, Any], name: str) -> Optional[Callable]:
    fn = conf.pop(name, None)
    if fn is not None and not callable(fn):
        raise TypeError(f"{name} must be callable, not {type(fn).__name__}")
    return fn
