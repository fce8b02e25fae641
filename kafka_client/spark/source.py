"""The data source class Spark instantiates: ``format("kafka_native")``."""
from __future__ import annotations

from pyspark.sql.datasource import (DataSource, DataSourceReader, DataSourceStreamReader,
                                    DataSourceStreamWriter, DataSourceWriter)
from pyspark.sql.types import StructType

from .options import (
    KafkaOptionError,
    include_headers,
    parse_read_options,
    parse_write_options,
)
from .reader import KafkaBatchReader
from .schema import kafka_schema
from .stream import KafkaStreamReader
from .writer import KafkaBatchWriter, KafkaStreamWriter, check_write_schema

__all__ = ["KafkaDataSource", "SOURCE_NAME"]

#: The format name. Spark's own JVM connector is "kafka", so this one cannot be.
SOURCE_NAME = "kafka_native"


class KafkaDataSource(DataSource):
    """Kafka topics as a Spark data source on kafka_client: batch and streaming reads into
    Arrow, batch and streaming writes. Options and schema: docs/spark.md."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        return kafka_schema(include_headers(self.options))

    def _check_schema(self, schema: StructType, include_headers: bool) -> None:
        want = kafka_schema(include_headers)
        if schema != want:
            raise KafkaOptionError(
                f"the {SOURCE_NAME} source has a fixed schema ({want.simpleString()}); "
                f"do not give .schema(...) when reading (got {schema.simpleString()})")

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = parse_read_options(self.options, streaming=False)
        self._check_schema(schema, opts.include_headers)
        return KafkaBatchReader(opts, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        opts = parse_read_options(self.options, streaming=True)
        self._check_schema(schema, opts.include_headers)
        return KafkaStreamReader(opts, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            # A topic cannot be overwritten: refused, as by Spark's own Kafka sink (the
            # rows were appended silently). A streaming query's "complete" output mode
            # comes to streamWriter() and stays accepted.
            raise KafkaOptionError(f"the {SOURCE_NAME} sink only appends: save mode "
                                   f"'overwrite' cannot replace a topic's records (use "
                                   f"'append')")
        opts = parse_write_options(self.options)
        return KafkaBatchWriter(opts, check_write_schema(schema, opts))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        opts = parse_write_options(self.options)
        return KafkaStreamWriter(opts, check_write_schema(schema, opts))
