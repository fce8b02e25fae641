"""Type stub of the compiled output-buffer helper of kafka_proto.compression."""

class OutputBuffer:
    """Writable view onto a new, not yet shared ``bytes`` object of ``size`` bytes."""

    def __init__(self, size: int) -> None: ...
    def __len__(self) -> int: ...
    def __buffer__(self, flags: int) -> memoryview: ...
    def take(self) -> bytes:
        """Return the bytes object once every writer released its view."""
