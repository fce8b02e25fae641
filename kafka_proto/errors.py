"""Exceptions raised by the codec, and the broker error-code table.

Every exception the codec raises for bad input derives from :class:`KafkaProtocolError`.
Decoders raise a :class:`ProtocolDecodeError` subclass for malformed bytes; encoders raise
:class:`ProtocolEncodeError` for values that cannot be represented on the wire.
"""
from __future__ import annotations

from typing import NamedTuple


class KafkaProtocolError(Exception):
    """Base of every error the codec raises."""


class ProtocolDecodeError(KafkaProtocolError, ValueError):
    """Input bytes are not a valid encoding of what was asked for."""


class TruncatedDataError(ProtocolDecodeError):
    """Input ends before a field (or a length it declared) is complete."""


class InvalidLengthError(ProtocolDecodeError):
    """A length or count read from the input is negative, or larger than the input allows."""


class InvalidVarintError(ProtocolDecodeError):
    """A variable-length integer is longer than its type allows."""


class CorrelationIdError(ProtocolDecodeError):
    """A response's correlation id matches no request in flight, or skips older ones."""


class CorruptRecordError(ProtocolDecodeError):
    """A record batch or legacy message is malformed."""


class CrcMismatchError(CorruptRecordError):
    """A record batch's or message's checksum does not match its bytes."""


class UnsupportedMagicError(CorruptRecordError):
    """A record batch or message has a magic (format version) this codec does not read."""


class CompressionError(KafkaProtocolError):
    """Compressing or decompressing a payload failed."""


class DecompressionError(CompressionError, CorruptRecordError):
    """A compressed payload is corrupt."""


class DecompressionLimitError(DecompressionError):
    """A compressed payload expands beyond the allowed size (a decompression bomb)."""


class UnsupportedCompressionError(CompressionError):
    """The compression codec id is unknown or not allowed in this format."""


class ProtocolEncodeError(KafkaProtocolError, ValueError):
    """A value cannot be encoded: out of range, wrong type, or absent from the chosen version."""


class UnsupportedVersionError(KafkaProtocolError):
    """The API key or version is not one this codec knows."""


class BrokerError(NamedTuple):
    """One row of the broker error table."""

    code: int
    name: str
    retriable: bool


def broker_error(code: int) -> BrokerError:
    """Return the table row for a broker error code (unknown codes map to a synthetic row)."""
    row = ERRORS_BY_CODE.get(code)
    if row is None:
        return BrokerError(code, f"UNKNOWN_ERROR_{code}", False)
    return row


# The generated table needs BrokerError, defined above; it is public through this module.
from kafka_proto._error_table import ERRORS_BY_CODE, ERRORS_BY_NAME, ErrorCode  # noqa: E402
