"""Checksums: CRC-32C (record batches v2) and CRC-32 (legacy messages), on the fastest code
path this CPU has, the GIL released for large buffers. Compiled (``kafka_proto._crc``);
this is the public name to import them by."""
from kafka_proto._crc import (
    CRC32_IMPLEMENTATION,
    IMPLEMENTATION,
    IMPLEMENTATIONS,
    crc32,
    crc32_software,
    crc32c,
    crc32c_software,
    crc32c_using,
)

__all__ = ["CRC32_IMPLEMENTATION", "IMPLEMENTATION", "IMPLEMENTATIONS", "crc32",
           "crc32_software", "crc32c", "crc32c_software", "crc32c_using"]
