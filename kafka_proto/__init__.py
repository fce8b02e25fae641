"""kafka_proto: the Kafka wire protocol, sans-I/O, with a Cython hot path."""
from kafka_proto.errors import (  # noqa: F401
    CompressionError,
    CorruptRecordError,
    CrcMismatchError,
    DecompressionError,
    DecompressionLimitError,
    InvalidLengthError,
    InvalidVarintError,
    KafkaProtocolError,
    ProtocolDecodeError,
    ProtocolEncodeError,
    TruncatedDataError,
    UnsupportedCompressionError,
    UnsupportedMagicError,
    UnsupportedVersionError,
)

__version__ = "0.1.0"
