"""Hostile input for kafka_proto.compression: bombs, lying headers, corruption, truncation."""
import gzip
import struct
import zlib

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_proto import compression as C
from kafka_proto.errors import (
    CorruptRecordError,
    DecompressionError,
    DecompressionLimitError,
    KafkaProtocolError,
)

MiB = 1024 * 1024
ZEROS = bytes(16 * MiB)
CODECS = [C.CODEC_GZIP, C.CODEC_SNAPPY, C.CODEC_LZ4, C.CODEC_ZSTD]
DATA = b"".join(b"record %06d payload payload payload " % i for i in range(3000))


def test_error_hierarchy():
    # A consumer catching CorruptRecordError sees corrupt compressed payloads too.
    assert issubclass(DecompressionError, CorruptRecordError)
    assert issubclass(DecompressionLimitError, DecompressionError)


@pytest.mark.parametrize("codec", CODECS)
def test_bomb_stops_at_limit(codec):
    packed = C.compress(codec, ZEROS)
    assert len(packed) < MiB  # a real bomb: small in, big out
    with pytest.raises(DecompressionLimitError):
        C.decompress(codec, packed, max_size=MiB)
    with pytest.raises(DecompressionLimitError):
        C.decompress(codec, packed, max_size=len(ZEROS) - 1)
    assert len(C.decompress(codec, packed, max_size=len(ZEROS))) == len(ZEROS)


@pytest.mark.parametrize("codec", [C.CODEC_NONE] + CODECS)
def test_limit_zero(codec):
    with pytest.raises(DecompressionLimitError):
        C.decompress(codec, C.compress(codec, b"x"), max_size=0)


def test_limit_of_any_size_is_taken():
    # Streamed paths (several gzip members or zstd frames) with limits up to sys.maxsize.
    gz = gzip.compress(DATA[:70000]) + gzip.compress(DATA[70000:])
    zs = zstandard.ZstdCompressor().compress(DATA[:70000]) + C.compress(C.CODEC_ZSTD,
                                                                        DATA[70000:])
    for limit in (len(DATA), 2**40, 2**63 - 1):
        assert C.decompress(C.CODEC_GZIP, gz, limit) == DATA
        assert C.decompress(C.CODEC_ZSTD, zs, limit) == DATA
    for limit in (len(DATA) - 1, 70000):
        with pytest.raises(DecompressionLimitError):
            C.decompress(C.CODEC_GZIP, gz, limit)
        with pytest.raises(DecompressionLimitError):
            C.decompress(C.CODEC_ZSTD, zs, limit)


def test_gzip_bomb_in_many_members():
    member = gzip.compress(bytes(MiB), 9)
    with pytest.raises(DecompressionLimitError):
        C.decompress(C.CODEC_GZIP, member * 20, max_size=10 * MiB)
    assert len(C.decompress(C.CODEC_GZIP, member * 3, max_size=3 * MiB)) == 3 * MiB


def test_snappy_lying_preamble_checked_before_decoding():
    # A raw block whose varint preamble claims 4 GiB: rejected from the preamble alone.
    lying = b"\xff\xff\xff\xff\x0f" + b"\x00" * 20
    with pytest.raises(DecompressionLimitError):
        C.decompress(C.CODEC_SNAPPY, lying)
    # Same inside xerial framing, where the per-block sum is checked first.
    header = bytes.fromhex("82534e41505059000000000100000001")
    blk = bytes(cramjam.snappy.compress_raw(bytes(60000)))
    stream = header + (struct.pack(">i", len(blk)) + blk) * 100  # 6 MB declared
    with pytest.raises(DecompressionLimitError):
        C.decompress(C.CODEC_SNAPPY, stream, max_size=5 * MiB)
    assert len(C.decompress(C.CODEC_SNAPPY, stream, max_size=6 * MiB)) == 6_000_000


def test_snappy_preamble_larger_than_content_is_corrupt():
    blk = bytearray(cramjam.snappy.compress_raw(DATA))
    blk[0:3] = b"\xff\xff\x07"  # preamble now claims ~128 KiB, the body is shorter
    with pytest.raises(DecompressionError):
        C.decompress(C.CODEC_SNAPPY, bytes(blk))


@pytest.mark.parametrize("length,what", [
    (0x80000000, "negative"),
    (0xFFFFFFFF, "negative"),
    (512 * MiB + 1, "above 512 MiB"),
    (0, "empty"),
    (1000, "truncated"),
])
def test_snappy_bad_block_lengths(length, what):
    stream = bytes.fromhex("82534e41505059000000000100000001") + struct.pack(">I", length) \
        + b"\x05abcde"
    with pytest.raises(DecompressionError, match=what):
        C.decompress(C.CODEC_SNAPPY, stream)


def test_snappy_truncated_length_field():
    packed = C.compress(C.CODEC_SNAPPY, DATA)
    with pytest.raises(DecompressionError):
        C.decompress(C.CODEC_SNAPPY, packed + b"\x00\x00")


def test_lz4_oversized_and_truncated_blocks():
    packed = bytearray(C.compress(C.CODEC_LZ4, DATA))
    # first block size above the 64 KiB declared by BD
    bad = bytearray(packed)
    struct.pack_into("<I", bad, 7, 65537)
    with pytest.raises(DecompressionError, match="above max"):
        C.decompress(C.CODEC_LZ4, bytes(bad))
    # stored flag with a size above the block max
    struct.pack_into("<I", bad, 7, 0x80000000 | 0x7FFFFFFF)
    with pytest.raises(DecompressionError):
        C.decompress(C.CODEC_LZ4, bytes(bad))
    for cut in (0, 3, 6, 7, 9, 20, len(packed) - 1):
        with pytest.raises(DecompressionError):
            C.decompress(C.CODEC_LZ4, bytes(packed[:cut]))


def test_lz4_bad_header_fields():
    packed = C.compress(C.CODEC_LZ4, DATA)
    for idx, value, msg in [
        (0, 0x05, "magic"),
        (4, 0x20, "version"),      # version bits 00
        (4, 0x61, "dictionary"),   # dict id flag
        (4, 0x62, "reserved"),
        (5, 0x41, "reserved"),
        (5, 0x30, "block max"),    # block size id 3
        (6, packed[6] ^ 0x5A, "checksum"),
    ]:
        bad = bytearray(packed)
        bad[idx] = value
        with pytest.raises(DecompressionError, match=msg):
            C.decompress(C.CODEC_LZ4, bytes(bad))


def test_lz4_content_size_field_is_not_trusted():
    # A frame declaring 2**62 bytes of content decodes by its blocks only.
    frame = bytearray(lz4.frame.compress(DATA, store_size=True))
    assert frame[4] & 0x08
    frame[6:14] = struct.pack("<Q", 1 << 62)
    frame[14] = (C.xxh32(bytes(frame[4:14])) >> 8) & 0xFF
    assert C.decompress(C.CODEC_LZ4, bytes(frame)) == DATA


def test_lz4_corrupt_block_keeps_cause():
    packed = bytearray(C.compress(C.CODEC_LZ4, DATA))
    (size,) = struct.unpack_from("<I", packed, 7)
    packed[11:11 + size] = b"\xff" * size
    with pytest.raises(DecompressionError) as info:
        C.decompress(C.CODEC_LZ4, bytes(packed))
    assert info.value.__cause__ is not None


def test_zstd_lying_content_size_not_allocated():
    # Frame header claiming 2**60 bytes, then one tiny raw block: refused from the header.
    fhd = 0xC0 | 0x20  # 8-byte content size, single segment
    head = struct.pack("<IB", 0xFD2FB528, fhd)
    raw_block = struct.pack("<I", (3 << 3) | 1)[:3] + b"abc"  # last block, raw, 3 bytes
    with pytest.raises(DecompressionError, match="declares"):
        C.decompress(C.CODEC_ZSTD, head + struct.pack("<Q", 1 << 60) + raw_block)
    with pytest.raises(DecompressionError, match="declares"):
        C.decompress(C.CODEC_ZSTD, head + struct.pack("<Q", 4) + raw_block)
    assert C.decompress(C.CODEC_ZSTD, head + struct.pack("<Q", 3) + raw_block) == b"abc"
    # Plausible size, but above the budget: a limit error before any decoding.
    big = zstandard.ZstdCompressor().compress(DATA)
    with pytest.raises(DecompressionLimitError):
        C.decompress(C.CODEC_ZSTD, big, max_size=len(DATA) - 1)


def test_zstd_content_size_smaller_than_data():
    packed = bytearray(zstandard.ZstdCompressor(level=1).compress(DATA[:200]))
    info = zstandard.get_frame_parameters(bytes(packed))
    assert info.content_size == 200
    # single-segment frame with 1-byte size field right after the descriptor
    assert packed[4] & 0x20 and packed[4] >> 6 == 0
    packed[5] = 150
    with pytest.raises(DecompressionError):
        C.decompress(C.CODEC_ZSTD, bytes(packed))


def test_zstd_bomb_without_content_size_streams():
    cctx = zstandard.ZstdCompressor(write_content_size=False)
    packed = cctx.compress(ZEROS)
    with pytest.raises(DecompressionLimitError):
        C.decompress(C.CODEC_ZSTD, packed, max_size=3 * MiB)
    assert C.decompress(C.CODEC_ZSTD, packed, max_size=len(ZEROS)) == ZEROS


def test_zstd_truncated_frame_is_an_error():
    # The streaming decoder would silently return a prefix; the frame walk catches it.
    packed = zstandard.ZstdCompressor(write_content_size=False).compress(DATA)
    for cut in (1, 4, 5, 8, len(packed) // 2, len(packed) - 1):
        with pytest.raises(DecompressionError):
            C.decompress(C.CODEC_ZSTD, packed[:cut])
    with pytest.raises(DecompressionError):
        C.decompress(C.CODEC_ZSTD, packed + b"junk")


@pytest.mark.parametrize("codec", CODECS)
def test_empty_input(codec):
    with pytest.raises(DecompressionError):
        C.decompress(codec, b"")


@pytest.mark.parametrize("codec", CODECS)
def test_garbage_input(codec):
    with pytest.raises(DecompressionError):
        C.decompress(codec, b"this is not compressed data at all" * 3)


def test_gzip_errors_keep_cause_and_truncation_detected():
    packed = C.compress(C.CODEC_GZIP, DATA)
    bad = bytearray(packed)
    bad[len(bad) // 2] ^= 0xFF
    bad[-5] ^= 0xFF  # CRC/size trailer as well
    with pytest.raises(DecompressionError) as info:
        C.decompress(C.CODEC_GZIP, bytes(bad))
    assert isinstance(info.value.__cause__, zlib.error)
    with pytest.raises(DecompressionError, match="truncated"):
        C.decompress(C.CODEC_GZIP, packed[:-10])


@pytest.mark.parametrize("codec", CODECS)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_mutated_payloads_raise_only_codec_errors(codec, data):
    packed = bytearray(C.compress(codec, DATA[:20000]))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(packed) - 1))
        packed[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(packed)))
    try:
        out = C.decompress(codec, bytes(packed[:cut]), max_size=1 << 20)
    except KafkaProtocolError as e:
        assert isinstance(e, DecompressionError)
    else:
        assert len(out) <= 1 << 20


@pytest.mark.parametrize("codec", CODECS)
@settings(max_examples=60, deadline=None)
@given(prefix=st.binary(max_size=64))
def test_random_bytes_behind_valid_magic(codec, prefix):
    magic = {1: b"\x1f\x8b\x08\x00", 2: bytes.fromhex("82534e41505059000000000100000001"),
             3: b"\x04\x22\x4d\x18", 4: b"\x28\xb5\x2f\xfd"}[codec]
    try:
        out = C.decompress(codec, magic + prefix, max_size=1 << 16)
    except DecompressionError:
        pass
    else:
        assert len(out) <= 1 << 16


def test_gzip_lying_trailer_size():
    # The one-shot path sizes its buffer from ISIZE; a lie falls back to the streaming
    # decoder, which reports the mismatch instead of returning a wrong length.
    packed = bytearray(gzip.compress(DATA))
    for isize in (len(DATA) - 1, len(DATA) + 1, 1, 2**32 - 1):
        struct.pack_into("<I", packed, len(packed) - 4, isize)
        with pytest.raises(DecompressionError):
            C.decompress(C.CODEC_GZIP, bytes(packed))


def test_gzip_fast_path_never_exceeds_limit():
    packed = gzip.compress(bytes(2 * MiB))
    with pytest.raises(DecompressionLimitError):
        C.decompress(C.CODEC_GZIP, packed, max_size=2 * MiB - 1)
    assert C.decompress(C.CODEC_GZIP, packed, max_size=2 * MiB) == bytes(2 * MiB)


def test_lz4_block_and_content_checksums_verified():
    frame = bytearray(lz4.frame.compress(DATA, block_checksum=True, content_checksum=True,
                                         block_linked=False))
    assert C.decompress(C.CODEC_LZ4, bytes(frame)) == DATA
    (size,) = struct.unpack_from("<I", frame, 7)
    bad = bytearray(frame)
    bad[11 + (size & 0x7FFFFFFF)] ^= 1  # first block's checksum
    with pytest.raises(DecompressionError, match="block checksum"):
        C.decompress(C.CODEC_LZ4, bytes(bad))
    bad = bytearray(frame)
    bad[-1] ^= 1  # content checksum
    with pytest.raises(DecompressionError, match="content checksum"):
        C.decompress(C.CODEC_LZ4, bytes(bad))


def test_lz4_linked_block_bomb_stops():
    frame = lz4.frame.compress(bytes(8 * MiB), block_linked=True)
    with pytest.raises(DecompressionLimitError):
        C.decompress(C.CODEC_LZ4, frame, max_size=MiB + 5)


def test_lz4_stored_blocks_respect_limit():
    import os

    noise = os.urandom(300_000)
    packed = C.compress(C.CODEC_LZ4, noise)
    with pytest.raises(DecompressionLimitError):
        C.decompress(C.CODEC_LZ4, packed, max_size=200_000)
    assert C.decompress(C.CODEC_LZ4, packed, max_size=300_000) == noise


def test_lz4_bad_content_checksum_of_empty_frame():
    empty = bytearray(lz4.frame.compress(b"", content_checksum=True))
    empty[-1] ^= 1
    data = C.compress(C.CODEC_LZ4, DATA)
    for packed in (bytes(empty), data + bytes(empty), bytes(empty) + data):
        with pytest.raises(DecompressionError, match="content checksum"):
            C.decompress(C.CODEC_LZ4, packed)
