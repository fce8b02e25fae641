"""pyarrow arrays as ``produce_batch()`` columns: a binary or string array becomes a
:class:`kafka_proto.records.BinaryColumn` over the array's own buffers, from which the
codec encodes the records with no Python object per message. Imported only when a
pyarrow object is given (pyarrow is optional: ``pip install kafka-native[arrow]``).
"""
from __future__ import annotations

from typing import Any

import pyarrow as pa

from kafka_proto.records import BinaryColumn

__all__ = ["binary_column"]

_EMPTY_OFFSETS = bytes(8)
# Binary types in another layout, converted once (the view types exist from pyarrow 16).
_OTHER_BINARY = tuple(check for check in (pa.types.is_fixed_size_binary,
                                          getattr(pa.types, "is_binary_view", None),
                                          getattr(pa.types, "is_string_view", None))
                      if check is not None)


def binary_column(array: Any, what: str) -> BinaryColumn:
    """``array`` (a pyarrow ``Array`` or ``ChunkedArray`` of ``binary``, ``string``,
    their ``large_`` and ``_view`` forms, or ``fixed_size_binary``) as a column; strings
    are their UTF-8 bytes. TypeError naming ``what`` for any other pyarrow object."""
    if isinstance(array, pa.ChunkedArray):
        array = array.chunk(0) if array.num_chunks == 1 else array.combine_chunks()
    if not isinstance(array, pa.Array):
        raise TypeError(f"{what} must be a list of messages or a pyarrow array, not "
                        f"pyarrow {type(array).__name__}")
    t = array.type
    if pa.types.is_binary(t) or pa.types.is_string(t):
        wide = False
    elif pa.types.is_large_binary(t) or pa.types.is_large_string(t):
        wide = True
    elif any(check(t) for check in _OTHER_BINARY):
        array, wide = array.cast(pa.large_binary()), True
    else:
        raise TypeError(f"{what} must be a pyarrow binary or string array, not {t}")
    if not len(array):
        return BinaryColumn(0, _EMPTY_OFFSETS, b"", None, 0, wide)
    validity, offsets, data = array.buffers()
    return BinaryColumn(len(array), offsets, b"" if data is None else data,
                        validity if array.null_count else None, array.offset, wide)
