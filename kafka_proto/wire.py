"""The wire's primitive types: :class:`Writer` and :class:`Reader` over Kafka's integers,
varints, strings, bytes, arrays, UUIDs and tagged fields (classic and compact forms), and
one-off varint encoders and decoders. Compiled (``kafka_proto._wire``); this is the public
name to import them by."""
from kafka_proto._wire import (
    Reader,
    Writer,
    decode_uvarint,
    decode_varint,
    decode_varlong,
    encode_uvarint,
    encode_varint,
    encode_varlong,
)

__all__ = ["Reader", "Writer", "decode_uvarint", "decode_varint", "decode_varlong",
           "encode_uvarint", "encode_varint", "encode_varlong"]
