"""The DataFrame schema of the source: the one of Spark's built-in Kafka source, so that
queries written for it keep working.

    key binary, value binary, topic string, partition int, offset long,
    timestamp timestamp, timestampType int
    [, headers array<struct<key string, value binary>>]   (with includeHeaders)
"""
from __future__ import annotations

from typing import Any

from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, StringType,
                               StructField, StructType, TimestampType)

__all__ = ["HEADERS_TYPE", "arrow_schema", "kafka_schema"]

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()),
                                     StructField("value", BinaryType())]))

_BASE = [
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
]


def kafka_schema(include_headers: bool = False) -> StructType:
    """The read schema; ``headers`` is the last column when ``include_headers``."""
    fields = list(_BASE)
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


def arrow_schema(schema: StructType) -> Any:
    """The Arrow schema Spark expects for batches of ``schema`` (Spark compares the two
    exactly, nullability and time zone included)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")
