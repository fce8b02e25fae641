"""Arrow output of the consumer: the column buffers the codec fills
(:class:`kafka_proto.records.ColumnBuilder`) wrapped as a ``pyarrow.RecordBatch`` without
copying. Needs the optional ``pyarrow`` package (``pip install kafka-native[arrow]``).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Tuple

__all__ = ["SCHEMA_FIELDS", "schema", "empty_record_batch", "to_record_batch",
           "rows_of", "keep_partitions", "drop_rows"]

#: column names, in order
SCHEMA_FIELDS = ("topic", "partition", "offset", "timestamp", "timestamp_type", "key",
                 "value", "headers")

_pa: Any = None
_schema: Any = None


def _pyarrow() -> Any:
    global _pa
    if _pa is None:
        try:
            import pyarrow
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError("consume_arrow() needs pyarrow: pip install "
                              "'kafka-native[arrow]' (or pyarrow)") from exc
        _pa = pyarrow
    return _pa


def schema() -> Any:
    """The ``pyarrow.Schema`` of :meth:`Consumer.consume_arrow` batches."""
    global _schema
    if _schema is None:
        pa = _pyarrow()
        header = pa.struct([pa.field("key", pa.string(), nullable=False),
                            pa.field("value", pa.binary())])
        _schema = pa.schema([
            pa.field("topic", pa.string(), nullable=False),
            pa.field("partition", pa.int32(), nullable=False),
            pa.field("offset", pa.int64(), nullable=False),
            pa.field("timestamp", pa.int64(), nullable=False),
            pa.field("timestamp_type", pa.int8(), nullable=False),
            pa.field("key", pa.binary()),
            pa.field("value", pa.binary()),
            pa.field("headers", pa.list_(header)),
        ])
    return _schema


def empty_record_batch() -> Any:
    """A ``pyarrow.RecordBatch`` of no rows, of :func:`schema`."""
    return _pyarrow().RecordBatch.from_pylist([], schema=schema())


def rows_of(batch: Any) -> List[Tuple[str, int, int]]:
    """(topic, partition, offset) of each row of a batch (Python objects: for the rare
    paths, not the hot one)."""
    return list(zip(batch.column("topic").to_pylist(), batch.column("partition").to_pylist(),
                    batch.column("offset").to_pylist()))


def keep_partitions(batch: Any, keep: Callable[[str, int], bool]) -> Any:
    """The rows of ``batch`` whose (topic, partition) ``keep`` accepts."""
    mask = [keep(t, p) for t, p, _o in rows_of(batch)]
    return batch if all(mask) else batch.filter(_pyarrow().array(mask, _pyarrow().bool_()))


def drop_rows(batch: Any, spans: List[Tuple[int, int]]) -> Any:
    """``batch`` without the rows ``start:end`` of each span."""
    mask = [True] * batch.num_rows
    for start, end in spans:
        mask[start:end] = [False] * (end - start)
    return batch.filter(_pyarrow().array(mask, _pyarrow().bool_()))


def to_record_batch(cols: Dict[str, Any]) -> Any:
    """A ``pyarrow.RecordBatch`` over the buffers of ``ColumnBuilder.finish()``."""
    pa = _pyarrow()
    sch = schema()
    n = cols["rows"]
    buf = pa.py_buffer

    def validity(bitmap: bytes, nulls: int) -> Any:
        return buf(bitmap) if nulls else None

    def fixed(name: str) -> Any:
        return pa.Array.from_buffers(sch.field(name).type, n, [None, buf(cols[name])])

    t_offs, t_data = cols["topic"]
    topic = pa.Array.from_buffers(pa.string(), n, [None, buf(t_offs), buf(t_data)])
    k_valid, k_offs, k_data, k_nulls = cols["key"]
    key = pa.Array.from_buffers(pa.binary(), n, [validity(k_valid, k_nulls), buf(k_offs),
                                                 buf(k_data)], null_count=k_nulls)
    v_valid, v_offs, v_data, v_nulls = cols["value"]
    value = pa.Array.from_buffers(pa.binary(), n, [validity(v_valid, v_nulls), buf(v_offs),
                                                   buf(v_data)], null_count=v_nulls)
    h_valid, h_offs, h_nulls, nheaders, (hk_offs, hk_data), hv = cols["headers"]
    hv_valid, hv_offs, hv_data, hv_nulls = hv
    hkey = pa.Array.from_buffers(pa.string(), nheaders, [None, buf(hk_offs), buf(hk_data)])
    hval = pa.Array.from_buffers(pa.binary(), nheaders, [validity(hv_valid, hv_nulls),
                                                         buf(hv_offs), buf(hv_data)],
                                 null_count=hv_nulls)
    htype = sch.field("headers").type
    pairs = pa.StructArray.from_arrays([hkey, hval], fields=list(htype.value_type))
    headers = pa.Array.from_buffers(htype, n, [validity(h_valid, h_nulls), buf(h_offs)],
                                    null_count=h_nulls, children=[pairs])
    return pa.RecordBatch.from_arrays(
        [topic, fixed("partition"), fixed("offset"), fixed("timestamp"),
         fixed("timestamp_type"), key, value, headers], schema=sch)
