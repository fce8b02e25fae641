"""Record batches: the v2 builder and reader, the legacy (magic 0/1) reader, control records.

    from kafka_proto.records import RecordBatchBuilder, read_batches

``read_batches(buffer)`` yields a :class:`RecordBatch` for each v2 batch and a
:class:`LegacyBatch` for each legacy entry, in buffer order; see ``_v2.pyx`` for the
errors raised on malformed input. A broker's view of stored batches, without their
records: ``read_batch_header`` / ``iter_batch_headers`` (:class:`BatchHeader`) and
``stamp_batch`` (base offset and partition leader epoch, in place); a producer's:
``restamp_batch`` (producer id, epoch, base sequence, CRC); legacy magic 0/1 message sets
for brokers before 0.11 and a broker's down-conversion: ``build_message_set``
(``LegacyMessage``). Columns in Arrow's memory layout: ``BinaryColumn`` (records encoded
from it by ``RecordBatchBuilder.append_many``) and ``ColumnBuilder`` (records decoded into
it). ``FAST_PATH`` tells whether the
CPython-specific speedups (kafka_proto/_c/cpython_internals.h) are in use: not on other
interpreters, nor with KAFKA_NATIVE_PLAIN=1 in the environment at import.
"""
from kafka_proto.records._v2 import (  # noqa: F401
    BATCH_HEADER_SIZE,
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    FAST_PATH,
    BatchHeader,
    BatchReader,
    BinaryColumn,
    ColumnBuilder,
    Compression,
    Record,
    RecordBatch,
    RecordBatchBuilder,
    RecordFactory,
    TimestampType,
    increment_sequence,
    iter_batch_headers,
    read_batch_header,
    read_batches,
    restamp_batch,
    stamp_batch,
)
from kafka_proto.records.message_set import LegacyMessage, build_message_set  # noqa: F401
from kafka_proto.records.control import (  # noqa: F401
    ControlRecord,
    ControlRecordType,
    build_control_batch,
    parse_control_record,
)

try:
    from kafka_proto.records._legacy import LegacyBatch  # noqa: F401
except ImportError:  # the legacy reader is not built yet

    class LegacyBatch:  # type: ignore[no-redef]
        """Placeholder: kafka_proto.records._legacy is not available."""

        def __init__(self, *args, **kwargs):
            raise RuntimeError("kafka_proto.records._legacy is not built")


__all__ = [
    "BATCH_HEADER_SIZE",
    "BatchHeader",
    "BinaryColumn",
    "ColumnBuilder",
    "Compression",
    "ControlRecord",
    "ControlRecordType",
    "DEFAULT_MAX_DECOMPRESSED_SIZE",
    "FAST_PATH",
    "LegacyBatch",
    "LegacyMessage",
    "Record",
    "RecordBatch",
    "RecordBatchBuilder",
    "RecordFactory",
    "TimestampType",
    "build_control_batch",
    "build_message_set",
    "increment_sequence",
    "iter_batch_headers",
    "parse_control_record",
    "read_batch_header",
    "read_batches",
    "restamp_batch",
    "stamp_batch",
]
