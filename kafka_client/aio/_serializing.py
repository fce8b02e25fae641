"""The asyncio producer and consumer that serialize keys and values themselves
(confluent-kafka's ``AsyncSerializingProducer`` and ``AsyncDeserializingConsumer``).

Both are made with ``await``: ``producer = await AsyncSerializingProducer(conf)``, as in
confluent-kafka, whose asyncio serializers may need the event loop to be built. The
serializers are plain callables ``(obj, ctx)`` or return awaitables (asyncio
serializers); a plain one runs on the event loop, so it should be cheap. As in
confluent-kafka 2.16, ``key.serializer.builder`` (and the other ``.builder`` forms) may
give a builder instead, whose ``build(conf, is_key)`` (awaited if it is a coroutine)
makes the serde; the client owns those and closes them in ``close()``, or, dropped
without it, when the blocking client it wraps is collected or left open at exit.
"""
from __future__ import annotations

import asyncio
import inspect
from typing import TYPE_CHECKING, Any, Callable, Dict, Generator, List, Optional, Tuple, Type

from kafka_client._cluster_id_resolver import AsyncClusterIdResolver, offer_resolver
from kafka_client._common import ClientBase
from kafka_client._serde_builders import AsyncClientSerdes, take_serdes
from kafka_client.aio._consumer import AIOConsumer
from kafka_client.aio.producer import AIOProducer
from kafka_client.producer.producer import OnDelivery
from kafka_client.errors import (
    ConsumeError,
    KeyDeserializationError,
    KeySerializationError,
    ValueDeserializationError,
    ValueSerializationError,
)
from kafka_client.serialization import MessageField, SerializationContext
from kafka_client.types import Message

__all__ = ["AsyncSerializingProducer", "AsyncDeserializingConsumer"]


def _made_with_await(cls: type, base: Type[Any], conf: Dict[str, Any], kind: str,
                     kwargs: Dict[str, Any], wrapped: Callable[[Any], ClientBase]) -> Any:
    """What ``cls(conf, **kwargs)`` returns: a coroutine making the instance, its
    ``key.<kind>``/``value.<kind>`` (or their ``.builder`` forms, built here and owned by
    the instance) taken out of ``conf`` and the rest given to ``base``'s constructor;
    ``wrapped(instance)`` is the blocking client it made, which closes the serdes built
    here if it stops without the instance's close()."""
    properties = take_serdes(conf, kind)    # TypeError/ValueError before any await

    async def build() -> Any:
        self: Any = object.__new__(cls)
        serdes, owned, client_conf = await properties.abuild()
        self._owned_serdes = AsyncClientSerdes(owned)
        self._key_serde, self._value_serde = serdes
        try:
            base.__init__(self, client_conf, **kwargs)
        except BaseException:
            await self._owned_serdes.aclose()
            raise
        wrapped(self)._serdes = self._owned_serdes
        # the asyncio serdes take a coroutine resolver; blocking ones get none, as
        # confluent-kafka's (they could not await it, and must not block the loop)
        offer_resolver("set_async_cluster_id_resolver", AsyncClusterIdResolver(self.cluster_id),
                       serdes)
        return self
    return build()


async def _close_owned(client: Any) -> None:
    """After the client's own close(): close the serdes it built (kept if that raised)."""
    await client._owned_serdes.aclose()


async def _apply(fn: Callable, data: Any, ctx: SerializationContext) -> Any:
    result = fn(data, ctx)
    if inspect.isawaitable(result):
        result = await result
    return result


class AsyncSerializingProducer(AIOProducer):
    """An :class:`AIOProducer` whose configuration may also hold ``key.serializer`` and
    ``value.serializer``, applied in :meth:`produce`. Made with ``await``."""

    # set by _made_with_await
    _key_serde: Optional[Callable[..., Any]]
    _value_serde: Optional[Callable[..., Any]]
    _owned_serdes: AsyncClientSerdes

    def __new__(cls, conf: Dict[str, Any], **kwargs: Any) -> Any:   # type: ignore[misc]
        return _made_with_await(cls, AIOProducer, conf, "serializer", kwargs,
                                lambda client: client._producer)

    def __init__(self, conf: Dict[str, Any], **kwargs: Any) -> None:  # pragma: no cover
        pass    # made by _made_with_await: ``await AsyncSerializingProducer(conf)``

    if TYPE_CHECKING:
        # Checkers take the constructor's result for an instance (they ignore a __new__
        # that returns something else): awaiting it must give one for them too.
        def __await__(self) -> Generator[Any, None, AsyncSerializingProducer]: ...

    async def close(self) -> None:
        """AIOProducer.close(), then close the serializers built from
        ``key.serializer.builder``/``value.serializer.builder`` (ready-made ones are left
        to the application)."""
        await AIOProducer.close(self)
        await _close_owned(self)

    async def produce(  # type: ignore[override]
                      self, topic: str, key: Any = None, value: Any = None,
                      partition: int = -1, timestamp: int = 0, headers: Any = None,
                      on_delivery: Optional[OnDelivery] = None
                      ) -> asyncio.Future[Message]:
        """Serialize ``key`` and ``value`` (KeySerializationError /
        ValueSerializationError if a serializer raises; nothing is queued then), then
        :meth:`AIOProducer.produce`. Note the order: ``key`` before ``value``, as in
        confluent-kafka. RuntimeError once closed and TypeError for a ``topic`` that is
        not a str come before the serializers run."""
        self._check_open()
        if not isinstance(topic, str):
            raise TypeError(f"topic must be a str, not {type(topic).__name__}")
        ctx = SerializationContext(topic, MessageField.KEY, headers)
        if self._key_serde is not None:
            try:
                key = await _apply(self._key_serde, key, ctx)
            except Exception as e:
                raise KeySerializationError(e) from e
        if self._value_serde is not None:
            ctx = SerializationContext(topic, MessageField.VALUE, headers)
            try:
                value = await _apply(self._value_serde, value, ctx)
            except Exception as e:
                raise ValueSerializationError(e) from e
        return await AIOProducer.produce(self, topic, value, key, partition, timestamp,
                                         headers, on_delivery)


class AsyncDeserializingConsumer(AIOConsumer):
    """An :class:`AIOConsumer` whose configuration may also hold ``key.deserializer`` and
    ``value.deserializer``, applied in :meth:`poll` and :meth:`consume`. Made with
    ``await``."""

    # set by _made_with_await
    _key_serde: Optional[Callable[..., Any]]
    _value_serde: Optional[Callable[..., Any]]
    _owned_serdes: AsyncClientSerdes

    def __new__(cls, conf: Dict[str, Any], **kwargs: Any) -> Any:   # type: ignore[misc]
        return _made_with_await(cls, AIOConsumer, conf, "deserializer", kwargs,
                                lambda client: client._consumer)

    def __init__(self, conf: Dict[str, Any], **kwargs: Any) -> None:  # pragma: no cover
        pass    # made by _made_with_await: ``await AsyncDeserializingConsumer(conf)``

    if TYPE_CHECKING:
        # as AsyncSerializingProducer's
        def __await__(self) -> Generator[Any, None, AsyncDeserializingConsumer]: ...

    async def close(self) -> None:
        """AIOConsumer.close(), then close the deserializers built from
        ``key.deserializer.builder``/``value.deserializer.builder`` (ready-made ones are
        left to the application)."""
        await AIOConsumer.close(self)
        await _close_owned(self)

    async def _decoded(self, msg: Message) -> Tuple[Any, Any]:
        """The message's (value, key) deserialized, the key first, the message left as
        it is (so that a read cancelled while a deserializer awaits can keep it for the
        next one, and an error carries the raw bytes), as in DeserializingConsumer."""
        value, key = msg.value(), msg.key()
        topic = msg.topic()
        assert topic is not None    # a record: an error event is not deserialized
        if self._key_serde is not None:
            ctx = SerializationContext(topic, MessageField.KEY, msg.headers())
            try:
                key = await _apply(self._key_serde, key, ctx)
            except Exception as e:
                raise KeyDeserializationError(e, msg) from e
        if self._value_serde is not None:
            ctx = SerializationContext(topic, MessageField.VALUE, msg.headers())
            try:
                value = await _apply(self._value_serde, value, ctx)
            except Exception as e:
                raise ValueDeserializationError(e, msg) from e
        return value, key

    async def poll(self, timeout: Optional[float] = -1) -> Optional[Message]:
        """The next message with its key and value deserialized, or None after
        ``timeout`` seconds. An error or event (``msg.error()`` set) raises
        :class:`~kafka_client.error.ConsumeError` carrying the message."""
        msg = await AIOConsumer.poll(self, timeout)
        if msg is None:
            return None
        error = msg.error()
        if error is not None:
            raise ConsumeError(error, kafka_message=msg)
        try:
            value, key = await self._decoded(msg)
        except (KeyDeserializationError, ValueDeserializationError):
            raise
        except BaseException:
            self._kept.keep([msg])      # cancelled while a deserializer awaited
            raise
        msg.set_value(value)
        msg.set_key(key)
        return msg

    async def consume(self, num_messages: int = 1,
                      timeout: Optional[float] = -1) -> List[Message]:
        """Up to ``num_messages`` messages, keys and values deserialized; messages that
        carry an error are returned as they are (check ``msg.error()``). When one fails
        to deserialize, the messages before it are returned, its
        Key/ValueDeserializationError is raised by the next read and the messages after
        it come with the reads after that (confluent-kafka raises at once and the rest
        of the batch is lost); if the read is cancelled while a deserializer awaits,
        the whole batch goes to the next read."""
        batch = await AIOConsumer.consume(self, num_messages, timeout)
        decoded: List[Optional[Tuple[Any, Any]]] = []
        try:
            for msg in batch:
                decoded.append(None if msg.error() is not None else await self._decoded(msg))
        except (KeyDeserializationError, ValueDeserializationError) as exc:
            failed = len(decoded)
            if not failed:
                self._kept.keep(batch[1:])
                raise
            self._kept.keep(batch[failed + 1:], failure=exc, failed=batch[failed])
            batch = batch[:failed]
        except BaseException:
            self._kept.keep(batch)      # cancelled: nothing of it was changed
            raise
        for msg, pair in zip(batch, decoded):
            if pair is not None:
                msg.set_value(pair[0])
                msg.set_key(pair[1])
        return batch
