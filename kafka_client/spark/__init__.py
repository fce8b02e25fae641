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
    ``"kafka_native"``. It also makes ``spark`` the session of the calling thread in
    Spark's JVM: Spark 4 looks the sink of a streaming write up in that thread's
    session, so a thread other than the one that registered the source, starting a
    streaming write to it, calls this first (else DATA_SOURCE_NOT_FOUND)."""
    spark.dataSource.register(KafkaDataSource)
    _make_active_in_this_thread(spark)
    return SOURCE_NAME


def _make_active_in_this_thread(spark: Any) -> None:
    # PySpark has no public call for it (getOrCreate() does not do it for an existing
    # session); a Spark Connect session has no JVM on this side and needs nothing.
    jvm = getattr(spark, "_jvm", None)
    jsession = getattr(spark, "_jsparkSession", None)
    if jvm is None or jsession is None:
        return
    sql = jvm.org.apache.spark.sql
    # Spark 4's class first, then the older one; neither there: registered all the same.
    for session_class in (lambda: sql.classic.SparkSession, lambda: sql.SparkSession):
        try:
            session_class().setActiveSession(jsession)
            return
        except Exception:  # pragma: no cover - not this Spark's class
            continue
