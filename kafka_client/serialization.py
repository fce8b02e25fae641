"""Serializers and deserializers for keys and values, under confluent-kafka's names.

A serializer turns an application object into ``bytes`` (or None) and a deserializer turns
``bytes`` (or None) back; both are called as ``f(obj, ctx)`` where ``ctx`` is a
:class:`SerializationContext` naming the topic, the field (key or value) and the headers.
:class:`~kafka_client.SerializingProducer` and :class:`~kafka_client.DeserializingConsumer`
call them for every message; plain functions of the same shape work too.

Failures raise :class:`SerializationError`. Where confluent-kafka's lets a builtin error
escape for an argument of the wrong type (``AttributeError`` from ``StringSerializer`` given
a non-``str`` and from ``StringDeserializer`` given a non-bytes, ``TypeError`` from the
integer and double deserializers given a non-bytes), ours raises a :class:`SerializationError`
naming the type that is also that builtin error, so either ``except`` clause catches it.
"""
from __future__ import annotations

import struct
from enum import Enum
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

from .errors import SerializationError

__all__ = [
    "MessageField",
    "SerializationContext",
    "SerializationError",
    "Serializer",
    "Deserializer",
    "StringSerializer",
    "StringDeserializer",
    "IntegerSerializer",
    "IntegerDeserializer",
    "DoubleSerializer",
    "DoubleDeserializer",
    "HeadersType",
    "SerializerBuilder",
    "DeserializerBuilder",
]

#: Headers as the serializing clients accept them: a dict or a list of (key, value) pairs.
#: (Mapping and Sequence, which a type checker lets vary: a Message's headers(), a list of
#: (str, bytes or None), fit; List[Tuple[str, Union[...]]] would refuse them.)
HeadersType = Union[Mapping[str, Union[str, bytes, None]],
                    Sequence[Tuple[str, Union[str, bytes, None]]]]


class MessageField(str, Enum):
    """Which part of a message a (de)serializer is working on. Its members are the
    strings confluent-kafka's are, in ``str()`` and f-strings too (``f"{topic}-{field}"``
    is how a Schema Registry subject name is made)."""

    NONE = "none"
    KEY = "key"
    VALUE = "value"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class SerializationContext:
    """What a (de)serializer is called for: ``topic``, ``field`` and the message's
    ``headers`` (None when there are none)."""

    __slots__ = ("topic", "field", "headers")

    def __init__(self, topic: str, field: MessageField,
                 headers: Optional[HeadersType] = None) -> None:
        self.topic = topic
        self.field = field
        self.headers = headers

    def __repr__(self) -> str:
        return f"SerializationContext(topic={self.topic!r}, field={self.field!r})"


class Serializer:
    """Base class of serializers: subclasses implement ``__call__(obj, ctx=None)`` returning
    ``bytes`` or None, and raise :class:`SerializationError` on failure."""

    __slots__: Tuple[str, ...] = ()

    def __call__(self, obj: Any, ctx: Optional[SerializationContext] = None) -> Optional[bytes]:
        raise NotImplementedError

    def set_cluster_id_resolver(self, resolver: Callable[[], Any]) -> None:
        """Take a callable giving the Kafka cluster id (the serializing clients offer one
        to every serde, for those that need it); this one does not."""

    def close(self) -> None:
        """Release what the serializer holds (a client closes the ones it built from a
        ``*.serializer.builder``); nothing here."""


class Deserializer:
    """Base class of deserializers: subclasses implement ``__call__(value, ctx=None)`` and
    raise :class:`SerializationError` on failure."""

    __slots__: Tuple[str, ...] = ()

    def __call__(self, value: Optional[bytes], ctx: Optional[SerializationContext] = None
                 ) -> Any:
        raise NotImplementedError

    def set_cluster_id_resolver(self, resolver: Callable[[], Any]) -> None:
        """Take a callable giving the Kafka cluster id (the deserializing clients offer
        one to every serde, for those that need it); this one does not."""

    def close(self) -> None:
        """Release what the deserializer holds (a client closes the ones it built from a
        ``*.deserializer.builder``); nothing here."""


class SerializerBuilder:
    """Base class of serializer builders, given to a serializing producer in
    ``key.serializer.builder``/``value.serializer.builder`` instead of a serializer: the
    producer calls :meth:`build` and owns (closes) what it makes. confluent-kafka's
    Schema Registry builders (``AvroSerializerBuilder``, ...) are such builders."""

    __slots__: Tuple[str, ...] = ()

    def build(self, conf: Dict[str, Any], is_key: bool) -> Tuple[Serializer, Dict[str, Any]]:
        """The serializer for keys (``is_key``) or values, and the client configuration
        ``conf`` without the properties the builder took for itself."""
        raise NotImplementedError


class DeserializerBuilder:
    """Base class of deserializer builders, given to a deserializing consumer in
    ``key.deserializer.builder``/``value.deserializer.builder``: see
    :class:`SerializerBuilder`."""

    __slots__: Tuple[str, ...] = ()

    def build(self, conf: Dict[str, Any], is_key: bool
              ) -> Tuple[Deserializer, Dict[str, Any]]:
        """The deserializer for keys (``is_key``) or values, and the client configuration
        ``conf`` without the properties the builder took for itself."""
        raise NotImplementedError


class _NotStrOrBytesError(SerializationError, AttributeError):
    """A string (de)serializer got an object of the wrong type: confluent-kafka's raise
    AttributeError there (no ``encode``/``decode`` method)."""


class _NotBytesError(SerializationError, TypeError):
    """A struct deserializer got an object that is not bytes-like: confluent-kafka's raise
    TypeError there (from ``struct.unpack``)."""


def _codec_checked(codec: str) -> str:
    """``codec`` as given (confluent-kafka keeps it so in ``.codec``), after a LookupError
    for an unknown one, at construction rather than at the first message."""
    import codecs

    codecs.lookup(codec)
    return codec


class StringSerializer(Serializer):
    """``str`` -> bytes in ``codec`` (UTF-8 by default); None stays None."""

    __slots__ = ("codec",)

    def __init__(self, codec: str = "utf_8") -> None:
        self.codec = _codec_checked(codec)

    def __call__(self, obj: Any, ctx: Optional[SerializationContext] = None) -> Optional[bytes]:
        if obj is None:
            return None
        if not isinstance(obj, str):
            raise _NotStrOrBytesError(
                f"StringSerializer takes a str, not {type(obj).__name__}")
        try:
            return obj.encode(self.codec)
        except UnicodeError as e:
            raise SerializationError(str(e)) from e


class StringDeserializer(Deserializer):
    """bytes in ``codec`` (UTF-8 by default) -> ``str``; None stays None."""

    __slots__ = ("codec",)

    def __init__(self, codec: str = "utf_8") -> None:
        self.codec = _codec_checked(codec)

    def __call__(self, value: Optional[bytes], ctx: Optional[SerializationContext] = None
                 ) -> Optional[str]:
        if value is None:
            return None
        # Not bytes(value): it turns an int n into n NUL bytes
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise _NotStrOrBytesError(
                f"StringDeserializer takes bytes, not {type(value).__name__}")
        try:
            return str(value, self.codec)
        except UnicodeError as e:
            raise SerializationError(str(e)) from e


class _StructSerializer(Serializer):
    __slots__ = ()
    _format: struct.Struct

    def __call__(self, obj: Any, ctx: Optional[SerializationContext] = None) -> Optional[bytes]:
        if obj is None:
            return None
        try:
            return self._format.pack(obj)
        except struct.error as e:
            raise SerializationError(str(e)) from e


class _StructDeserializer(Deserializer):
    __slots__ = ()
    _format: struct.Struct

    def __call__(self, value: Optional[bytes], ctx: Optional[SerializationContext] = None
                 ) -> Any:
        if value is None:
            return None
        try:
            return self._format.unpack(value)[0]
        except struct.error as e:
            raise SerializationError(str(e)) from e
        except TypeError as e:
            raise _NotBytesError(str(e)) from e


class IntegerSerializer(_StructSerializer):
    """``int`` -> 4 bytes, big-endian, signed (Java's IntegerSerializer); None stays None."""

    __slots__ = ()
    _format = struct.Struct(">i")


class IntegerDeserializer(_StructDeserializer):
    """4 bytes, big-endian, signed -> ``int``; None stays None."""

    __slots__ = ()
    _format = struct.Struct(">i")

    if TYPE_CHECKING:
        # What _StructDeserializer.__call__ returns here, for type checkers
        def __call__(self, value: Optional[bytes], ctx: Optional[SerializationContext] = None
                     ) -> Optional[int]: ...


class DoubleSerializer(_StructSerializer):
    """``float`` -> 8 bytes IEEE 754, big-endian (Java's DoubleSerializer); None stays None."""

    __slots__ = ()
    _format = struct.Struct(">d")


class DoubleDeserializer(_StructDeserializer):
    """8 bytes IEEE 754, big-endian -> ``float``; None stays None."""

    __slots__ = ()
    _format = struct.Struct(">d")

    if TYPE_CHECKING:
        # What _StructDeserializer.__call__ returns here, for type checkers
        def __call__(self, value: Optional[bytes], ctx: Optional[SerializationContext] = None
                     ) -> Optional[float]: ...
