"""A PySpark data source for Kafka on kafka_client (PySpark 4, ``pip install
'kafka-native[spark]'``)::

    from kafka_client.spark import register
    register(spark)
    df = (spark.read.format("kafka_native")
          .option("kafka.bootstrap.servers", "localhost:9092")
          .option("subscribe", "events").load())

See docs/spark.md for the options, the schema and the delivery semantics.
"""
from __future__ import annotations

from typing import Any

try:
    import pyspark  # noqa: F401  (a clear message when the extra is missing)
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("kafka_client.spark needs PySpark 4: pip install "
                      "'kafka-native[spark]'") from exc

from .offsets import KafkaDataLossError, OffsetRange
from .options import KafkaOptionError
from .schema import kafka_schema
from .source import SOURCE_NAME, KafkaDataSource

__all__ = ["KafkaDataLossError", "KafkaDataSource", "KafkaOptionError", "OffsetRange",
           "SOURCE_NAME", "kafka_schema", "register"]


def register(spark: Any) -> str:
    """Register the data source on the SparkSession ``spark``; returns its format name,
    ``"kafka_native"``."""
    spark.dataSource.register(KafkaDataSource)
    return SOURCE_NAME
