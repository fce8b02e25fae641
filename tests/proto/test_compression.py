"""Round trips, golden framing bytes and interop of kafka_proto.compression."""
import gzip
import struct

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st
from aiokafka import codec as aiokafka_codec
from kafka import codec as kp_codec  # kafka-python: an independent implementation

from kafka_proto import compression as C
from kafka_proto.errors import CompressionError, UnsupportedCompressionError

CODECS = [C.CODEC_NONE, C.CODEC_GZIP, C.CODEC_SNAPPY, C.CODEC_LZ4, C.CODEC_ZSTD]


def records(n=2000, size=100):
    """Compressible data shaped like a run of small records."""
    return b"".join(
        (b'{"id":%08d,"name":"user-%d","kind":"click"}' % (i * 7919 % 100003, i % 97))
        .ljust(size, b" ") for i in range(n)
    )


DATA = records()


def test_codec_ids_match_kafka():
    assert [int(c) for c in C.CompressionCodec] == [0, 1, 2, 3, 4]
    assert (C.CODEC_NONE, C.CODEC_GZIP, C.CODEC_SNAPPY, C.CODEC_LZ4, C.CODEC_ZSTD) == (0, 1, 2, 3, 4)
    assert [C.codec_name(c) for c in CODECS] == ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_round_trip_bytes_like(codec, kind):
    packed = C.compress(codec, kind(DATA))
    assert isinstance(packed, bytes)
    if codec:
        assert len(packed) < len(DATA) // 2
    out = C.decompress(codec, kind(packed))
    assert isinstance(out, bytes)
    assert out == DATA


@pytest.mark.parametrize("codec", CODECS)
@settings(max_examples=40, deadline=None)
@given(data=st.binary(max_size=200_000))
def test_round_trip_property(codec, data):
    assert C.decompress(codec, C.compress(codec, data)) == data


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_sizes_around_block_limits(codec):
    for n in (0, 1, 32767, 32768, 32769, 65535, 65536, 65537, 3 * 65536 + 5):
        data = (DATA * (n // len(DATA) + 1))[:n]
        assert C.decompress(codec, C.compress(codec, data)) == data, n


@pytest.mark.parametrize("codec", CODECS)
def test_max_size_is_inclusive(codec):
    packed = C.compress(codec, DATA)
    assert C.decompress(codec, packed, max_size=len(DATA)) == DATA


def test_unknown_codec():
    for codec in (5, 7, -1, 99):
        with pytest.raises(UnsupportedCompressionError):
            C.compress(codec, b"x")
        with pytest.raises(UnsupportedCompressionError):
            C.decompress(codec, b"x")


def test_none_codec_passes_bytes_through():
    assert C.compress(0, DATA) is DATA
    assert C.decompress(0, DATA) is DATA
    assert C.decompress(0, memoryview(DATA)) == DATA


# --- gzip --------------------------------------------------------------------------------


@pytest.mark.parametrize("one_shot", [True, False])
def test_gzip_is_rfc1952_and_levels_matter(one_shot, monkeypatch):
    if one_shot and not C._ZLIB_ONE_SHOT_GZIP:
        pytest.skip("zlib.compress(wbits=) needs Python 3.11")
    monkeypatch.setattr(C, "_ZLIB_ONE_SHOT_GZIP", one_shot)
    fast = C.compress(C.CODEC_GZIP, DATA, level=1)
    best = C.compress(C.CODEC_GZIP, DATA, level=9)
    for packed in (fast, best):
        assert packed[:3] == b"\x1f\x8b\x08"
        assert gzip.decompress(packed) == DATA
    assert len(best) < len(fast)
    assert C.compress(C.CODEC_GZIP, DATA, level=0)[:2] == b"\x1f\x8b"
    with pytest.raises(CompressionError):
        C.compress(C.CODEC_GZIP, DATA, level=10)


def test_gzip_concatenated_members_and_trailing_garbage():
    packed = gzip.compress(DATA[:1000]) + gzip.compress(DATA[1000:])
    assert C.decompress(C.CODEC_GZIP, packed) == DATA
    # GZIPInputStream ignores bytes after a member that do not start another one.
    assert C.decompress(C.CODEC_GZIP, gzip.compress(DATA) + b"\x00\x00\x00") == DATA


def test_gzip_interop_kafka_python():
    assert kp_codec.gzip_decode(C.compress(C.CODEC_GZIP, DATA)) == DATA
    assert C.decompress(C.CODEC_GZIP, kp_codec.gzip_encode(DATA)) == DATA


# --- snappy ------------------------------------------------------------------------------


def test_snappy_xerial_golden_header_and_blocks():
    data = DATA[:70000]
    packed = C.compress(C.CODEC_SNAPPY, data)
    assert packed[:16] == bytes.fromhex("82534e415050590000000001" "00000001")
    # Blocks of 32768, 32768 and 4464 bytes of input, each length-prefixed big-endian.
    pos, chunks = 16, []
    while pos < len(packed):
        (n,) = struct.unpack_from(">i", packed, pos)
        chunks.append(bytes(cramjam.snappy.decompress_raw(packed[pos + 4:pos + 4 + n])))
        pos += 4 + n
    assert pos == len(packed)
    assert [len(c) for c in chunks] == [32768, 32768, 70000 - 65536]
    assert b"".join(chunks) == data


def test_snappy_empty_input_is_one_raw_block_every_reader_decodes():
    packed = C.compress(C.CODEC_SNAPPY, b"")
    assert packed == b"\x00"  # a raw block: uncompressed length 0
    assert C.decompress(C.CODEC_SNAPPY, packed) == b""
    assert bytes(cramjam.snappy.decompress_raw(packed)) == b""
    assert aiokafka_codec.snappy_decode(packed) == b""
    assert kp_codec.snappy_decode(packed) == b""
    # What was written before: a xerial header and no block. Still read here; not by
    # kafka-python or aiokafka (nor librdkafka, which wants a block after the header).
    header_only = bytes.fromhex("82534e41505059000000000100000001")
    assert C.decompress(C.CODEC_SNAPPY, header_only) == b""
    with pytest.raises(Exception):
        kp_codec.snappy_decode(header_only)


def test_snappy_raw_block_accepted():
    raw = bytes(cramjam.snappy.compress_raw(DATA))
    assert C.decompress(C.CODEC_SNAPPY, raw) == DATA
    # Short payloads cannot hold a xerial header: always a raw block.
    assert C.decompress(C.CODEC_SNAPPY, bytes(cramjam.snappy.compress_raw(b"abc"))) == b"abc"


def test_snappy_concatenated_streams():
    a = C.compress(C.CODEC_SNAPPY, DATA[:50000])
    b = C.compress(C.CODEC_SNAPPY, DATA[50000:])
    assert C.decompress(C.CODEC_SNAPPY, a + b) == DATA
    # A second header that is not a valid one stops the stream (snappy-java behaviour).
    bad = bytearray(b)
    bad[5] ^= 0xFF
    assert C.decompress(C.CODEC_SNAPPY, a + bytes(bad)) == DATA[:50000]


def test_snappy_interop_kafka_python():
    assert kp_codec.snappy_decode(C.compress(C.CODEC_SNAPPY, DATA)) == DATA
    assert C.decompress(C.CODEC_SNAPPY, kp_codec.snappy_encode(DATA)) == DATA
    assert C.decompress(C.CODEC_SNAPPY, kp_codec.snappy_encode(DATA, xerial_compatible=False)) \
        == DATA
    # kafka-python's encoder and ours make the same framing (same block split, same library).
    assert kp_codec.snappy_encode(DATA) == C.compress(C.CODEC_SNAPPY, DATA)


# --- lz4 ---------------------------------------------------------------------------------


def test_lz4_frame_golden_header():
    packed = C.compress(C.CODEC_LZ4, DATA)
    # magic, FLG 0x60 (v01, independent blocks), BD 0x40 (64 KiB), HC over FLG+BD
    assert packed[:7] == bytes.fromhex("04224d18604082")
    assert packed[-4:] == b"\x00\x00\x00\x00"  # end mark, no content checksum
    assert lz4.frame.decompress(packed) == DATA
    assert kp_codec.lz4_decode(packed) == DATA


def test_xxh32_reference_values():
    # Known xxHash32 values (seed 0) and the lz4 library's own frame header checksums.
    assert C.xxh32(b"") == 0x02CC5D05
    assert C.xxh32(b"a") == 0x550D7456
    assert C.xxh32(b"abc") == 0x32D153FF
    assert C.xxh32(b"Nobody inspects the spammish repetition") == 0xE2293B2F
    for kw in ({}, {"store_size": True}, {"content_checksum": True}):
        frame = lz4.frame.compress(b"x" * 100, **kw)
        desc_end = 6 + (8 if frame[4] & 0x08 else 0)
        assert frame[desc_end] == (C.xxh32(frame[4:desc_end]) >> 8) & 0xFF


def test_lz4_legacy_header_checksum_kafka_3160():
    packed = C.compress(C.CODEC_LZ4, DATA, legacy_lz4_header=True)
    good = C.compress(C.CODEC_LZ4, DATA)
    assert packed[:6] == good[:6] and packed[7:] == good[7:]
    assert packed[6] == (C.xxh32(bytes.fromhex("04224d186040")) >> 8) & 0xFF
    assert packed[6] != good[6]
    with pytest.raises(RuntimeError):
        lz4.frame.decompress(packed)  # the reference decoder rejects it ...
    assert C.decompress(C.CODEC_LZ4, packed) == DATA  # ... we accept it, like Kafka


@pytest.mark.parametrize("kw", [
    {},
    {"block_linked": False},
    {"store_size": True, "content_checksum": True},
    {"block_checksum": True},
    {"block_size": lz4.frame.BLOCKSIZE_MAX4MB},
    {"block_size": lz4.frame.BLOCKSIZE_MAX256KB, "block_linked": True},
    {"compression_level": 12},
])
def test_lz4_frames_from_reference_library(kw):
    big = DATA * 3
    assert C.decompress(C.CODEC_LZ4, lz4.frame.compress(big, **kw)) == big


def test_lz4_stored_blocks_and_concatenated_frames():
    import os
    noise = os.urandom(150_000)  # incompressible: the writer stores blocks uncompressed
    packed = C.compress(C.CODEC_LZ4, noise)
    (first,) = struct.unpack_from("<I", packed, 7)
    assert first & 0x80000000
    assert C.decompress(C.CODEC_LZ4, packed) == noise
    assert C.decompress(C.CODEC_LZ4, packed + C.compress(C.CODEC_LZ4, DATA)) == noise + DATA


def test_lz4_levels():
    fast = C.compress(C.CODEC_LZ4, DATA)
    hc = C.compress(C.CODEC_LZ4, DATA, level=9)
    assert len(hc) < len(fast)
    assert C.decompress(C.CODEC_LZ4, hc) == DATA


# --- zstd --------------------------------------------------------------------------------


def test_zstd_frames():
    packed = C.compress(C.CODEC_ZSTD, DATA)
    assert packed[:4] == b"\x28\xb5\x2f\xfd"
    assert zstandard.ZstdDecompressor().decompress(packed) == DATA
    assert len(C.compress(C.CODEC_ZSTD, DATA, level=19)) < len(C.compress(C.CODEC_ZSTD, DATA,
                                                                          level=1))
    assert C.decompress(C.CODEC_ZSTD, C.compress(C.CODEC_ZSTD, DATA, level=-5)) == DATA


@pytest.mark.parametrize("kw", [
    {"write_content_size": False},
    {"write_checksum": True},
    {"write_content_size": False, "write_checksum": True, "level": 1},
])
def test_zstd_without_content_size_and_with_checksum(kw):
    big = DATA * 5
    cctx = zstandard.ZstdCompressor(**kw)
    assert C.decompress(C.CODEC_ZSTD, cctx.compress(big)) == big
    # streaming writer output (like zstd-jni's ZstdOutputStream): no content size
    chunker = cctx.chunker(chunk_size=16384)
    stream = b"".join(list(chunker.compress(big)) + list(chunker.finish()))
    assert C.decompress(C.CODEC_ZSTD, stream) == big


def test_zstd_multiple_and_skippable_frames():
    a = C.compress(C.CODEC_ZSTD, DATA[:5000])
    b = zstandard.ZstdCompressor(write_content_size=False).compress(DATA[5000:])
    skippable = struct.pack("<II", 0x184D2A53, 3) + b"abc"
    assert C.decompress(C.CODEC_ZSTD, a + skippable + b) == DATA


def test_zstd_bad_level():
    with pytest.raises(CompressionError):
        C.compress(C.CODEC_ZSTD, DATA, level=1000)


def test_output_helper_shrinks_in_place():
    from kafka_proto._compression import OutputBuffer

    for size, keep in ((100_000, 99_000), (10, 0), (10, 10), (3, 1)):
        out = OutputBuffer(size)
        with memoryview(out) as view:
            view[:keep] = b"q" * keep
        got = out.take(keep)
        assert type(got) is bytes and got == b"q" * keep and hash(got) == hash(b"q" * keep)


def test_lz4_frames_without_data_and_checksums():
    empty = lz4.frame.compress(b"", content_checksum=True)
    a = lz4.frame.compress(DATA, content_checksum=True, block_linked=False)
    b = lz4.frame.compress(DATA[:10], content_checksum=True, block_linked=True)
    cases = [
        (empty, b""),
        (empty + a, DATA),
        (a + empty + empty + b, DATA + DATA[:10]),
        (a + empty, DATA),
        (b + empty + a, DATA[:10] + DATA),
    ]
    for packed, expected in cases:
        assert C.decompress(C.CODEC_LZ4, packed) == expected


def test_output_helper_is_exact_and_single_use():
    from kafka_proto._compression import OutputBuffer

    out = OutputBuffer(5)
    view = memoryview(out)
    assert not view.readonly and len(view) == 5
    view[:] = b"abcde"
    with pytest.raises(BufferError):
        out.take()  # still exported
    view.release()
    assert out.take() == b"abcde"
    with pytest.raises(BufferError):
        out.take()


def test_xxh32_published_vectors():
    assert C.xxh32(b"") == 0x02CC5D05
    assert C.xxh32(b"a") == 0x550D7456
    assert C.xxh32(b"abc") == 0x32D153FF
    assert C.xxh32(b"Nobody inspects the spammish repetition") == 0xE2293B2F
    assert C.xxh32(memoryview(bytearray(b"abc"))) == 0x32D153FF


@settings(max_examples=80, deadline=None)
@given(size=st.integers(0, 70_000), checksum=st.booleans(), linked=st.booleans(),
       store_size=st.booleans())
def test_xxh32_agrees_with_lz4_frame_header_checksums(size, checksum, linked, store_size):
    # python-lz4 writes HC, the second byte of xxh32 over the frame descriptor (FLG, BD and
    # the content size when stored): an independent check over varied 2- and 10-byte inputs.
    frame = lz4.frame.compress(bytes(size), content_checksum=checksum, block_linked=linked,
                               store_size=store_size)
    end = 6 + (8 if frame[4] & 0x08 else 0)  # lz4 stores no size for empty content
    assert (C.xxh32(frame[4:end]) >> 8) & 0xFF == frame[end]


LZ4_VARIANTS = [
    {},
    {"block_checksum": True, "content_checksum": True},
    {"store_size": True, "block_linked": False},
    {"block_size": lz4.frame.BLOCKSIZE_MAX1MB},
]


@pytest.mark.parametrize("kw", LZ4_VARIANTS)
@settings(max_examples=25, deadline=None)
@given(data=st.binary(max_size=150_000) | st.builds(lambda n: DATA * n, st.integers(0, 4)))
def test_lz4_reader_gives_the_same_bytes_with_each_block_decoder(kw, data):
    import lz4.block

    from kafka_proto._compression import lz4_frame_decompress

    frame = lz4.frame.compress(data, **kw)
    assert lz4_frame_decompress(frame, 1 << 30, lz4.block.decompress) == data
    assert lz4_frame_decompress(frame, 1 << 30, lz4.block.decompress,
                                cramjam.lz4.decompress_block_into) == data
    assert lz4_frame_decompress(frame, 1 << 30, lz4.block.decompress,
                                cramjam.lz4.decompress_block_into,
                                cramjam.lz4.decompress_into) == data


@settings(max_examples=25, deadline=None)
@given(data=st.binary(max_size=300_000) | st.builds(lambda n: DATA * n, st.integers(0, 8)),
       content_size=st.booleans(), checksum=st.booleans())
def test_zstd_reader_round_trip_and_frame_walk(data, content_size, checksum):
    from kafka_proto._compression import zstd_frame_info

    frame = zstandard.ZstdCompressor(write_content_size=content_size,
                                     write_checksum=checksum).compress(data)
    end, size, bound = zstd_frame_info(frame)
    assert end == len(frame)
    assert size == (len(data) if content_size else -1)
    assert len(data) <= bound
    assert C.decompress(C.CODEC_ZSTD, frame, 1 << 30) == data


@settings(max_examples=25, deadline=None)
@given(data=st.binary(max_size=200_000) | st.builds(lambda n: DATA * n, st.integers(0, 4)),
       split=st.integers(0, 200_000), raw=st.booleans())
def test_snappy_reader_round_trip_and_peer(data, split, raw):
    if raw:
        packed = bytes(cramjam.snappy.compress_raw(data))
    elif 0 < split < len(data):  # two concatenated xerial streams
        packed = C.compress(C.CODEC_SNAPPY, data[:split]) + C.compress(C.CODEC_SNAPPY,
                                                                        data[split:])
    else:  # one stream: kafka-python's reader (an independent one) agrees
        packed = C.compress(C.CODEC_SNAPPY, data)
        assert kp_codec.snappy_decode(packed) == data
    assert C.decompress(C.CODEC_SNAPPY, packed, 1 << 30) == data


@pytest.mark.parametrize("version,direct", [("2.14.0", True), ("2.15.1", True),
                                            ("3.0.0rc1", True), ("2.13.0", False),
                                            ("2.11.0", False)])
def test_gzip_trailer_path_only_with_a_cramjam_that_inflates_in_place(monkeypatch, version,
                                                                      direct):
    """Before 2.14 cramjam inflates into a buffer of its own first (twice the output in
    memory: the decompression budget fails); those versions take the streaming decoder,
    which gives the same bytes."""
    class OldCramjam:
        __version__ = version
        gzip = cramjam.gzip

    monkeypatch.setattr(C, "_cramjam", OldCramjam)
    monkeypatch.setattr(C, "_cramjam_direct_gzip", None)
    payload = gzip.compress(bytes(range(256)) * 1024)
    assert (C._gzip_fast(memoryview(payload), 1 << 20) is not None) is direct
    assert C.decompress(1, payload, 1 << 20) == bytes(range(256)) * 1024
