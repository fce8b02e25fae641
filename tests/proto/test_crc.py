"""Tests for kafka_proto._crc: CRC-32C (hardware and software paths) and CRC-32."""
from __future__ import annotations

import array
import os
import threading
import zlib

import crc32c as crc32c_pkg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_proto import _crc

CHECK = b"123456789"
CRC32_FUNCS = [_crc.crc32, _crc.crc32_software]
CRC32C_FUNCS = [_crc.crc32c, _crc.crc32c_software] + [
    (lambda data, crc=0, _impl=impl: _crc.crc32c_using(_impl, data, crc))
    for impl in _crc.IMPLEMENTATIONS
]


def test_check_values():
    assert _crc.crc32c(CHECK) == 0xE3069283
    assert _crc.crc32c_software(CHECK) == 0xE3069283
    assert _crc.crc32(CHECK) == 0xCBF43926
    assert _crc.crc32_software(CHECK) == 0xCBF43926
    assert _crc.crc32c(b"") == 0
    assert _crc.crc32(b"") == 0
    # RFC 3720 (iSCSI) test vectors for CRC-32C.
    assert _crc.crc32c(bytes(32)) == 0x8A9136AA
    assert _crc.crc32c(b"\xff" * 32) == 0x62A8AB43
    assert _crc.crc32c(bytes(range(32))) == 0x46DD794E


def test_implementations_listed_and_selectable():
    assert _crc.IMPLEMENTATIONS[0] == "software"
    assert _crc.IMPLEMENTATION == _crc.IMPLEMENTATIONS[-1]
    for impl in _crc.IMPLEMENTATIONS:
        assert _crc.crc32c_using(impl, CHECK) == 0xE3069283
    with pytest.raises(ValueError, match="not available"):
        _crc.crc32c_using("no-such-path", CHECK)


def test_hardware_path_on_x86_64():
    import platform

    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("hardware CRC-32C path is x86-64 only")
    with open("/proc/cpuinfo") as f:
        flags = f.read()
    if " sse4_2" in flags and " pclmulqdq" in flags:
        assert "sse4.2" in _crc.IMPLEMENTATIONS
    if " avx512f" in flags and " vpclmulqdq" in flags:
        assert "avx512" in _crc.IMPLEMENTATIONS


@pytest.mark.parametrize("fn", CRC32C_FUNCS)
def test_crc32c_boundary_lengths(fn):
    # Lengths around the 8-byte word, the 48-byte minimum and 16-byte stream granularity
    # and the 3 x 8192 long blocks of the SSE4.2 path, the 256-byte start and the
    # 16/64/256-byte steps of the AVX-512 path, at every alignment of the start pointer.
    data = os.urandom(3 * 8192 * 2 + 64)
    lengths = {0, 1, 7, 8, 9, 15, 16, 17, 47, 48, 49, 63, 64, 65, 95, 96, 97, 255, 256, 257,
               271, 272, 319, 320, 511, 512, 767, 768, 769, 1023, 1024, 1025, 1039, 1040,
               1087, 1088, 1279, 1280, 1281, 1535, 1536, 1537, 2047, 2048, 2063,
               24575, 24576, 24577, 24576 + 47, 24576 + 48, 2 * 24576 + 5}
    for n in sorted(lengths):
        for off in range(8):
            chunk = memoryview(data)[off:off + n]
            assert fn(chunk) == crc32c_pkg.crc32c(bytes(chunk)), (n, off)


@settings(max_examples=80, deadline=None)
@given(st.binary(min_size=0, max_size=10000), st.integers(0, 15), st.integers(0, 2**32 - 1))
def test_crc32c_matches_reference(data, off, seed):
    view = memoryview(data)[min(off, len(data)):]
    expected = crc32c_pkg.crc32c(bytes(view))
    expected_seeded = crc32c_pkg.crc32c(bytes(view), seed)
    for fn in CRC32C_FUNCS:
        assert fn(view) == expected
        # Continuing from an arbitrary register value.
        assert fn(view, seed) == expected_seeded


@settings(max_examples=60, deadline=None)
@given(st.binary(min_size=0, max_size=10000), st.integers(0, 15), st.integers(0, 2**32 - 1))
def test_crc32_matches_zlib(data, off, seed):
    view = memoryview(data)[min(off, len(data)):]
    for fn in CRC32_FUNCS:
        assert fn(view) == zlib.crc32(view)
        assert fn(view, seed) == zlib.crc32(view, seed)


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=3000), st.binary(max_size=3000))
def test_continuation(a, b):
    for fn in CRC32C_FUNCS + CRC32_FUNCS:
        assert fn(b, fn(a)) == fn(a + b)


def test_large_buffer_paths_agree():
    # Above the GIL-release threshold and several long blocks.
    data = os.urandom((1 << 20) + 13)
    expected = crc32c_pkg.crc32c(data)
    for fn in CRC32C_FUNCS:
        assert fn(data) == expected
        assert fn(bytearray(data)) == expected
    for fn in CRC32_FUNCS:
        assert fn(data) == zlib.crc32(data)
        assert fn(bytearray(data), 77) == zlib.crc32(data, 77)


def test_any_bytes_like():
    data = bytes(range(256)) * 8
    expected = crc32c_pkg.crc32c(data)
    assert _crc.crc32c(bytearray(data)) == expected
    assert _crc.crc32c(memoryview(data)) == expected
    assert _crc.crc32c(array.array("B", data)) == expected
    assert _crc.crc32c(array.array("I", data)) == expected  # multi-byte items: raw bytes
    # A strided view is accepted too (compacted first).
    assert _crc.crc32c(memoryview(data)[::2]) == crc32c_pkg.crc32c(data[::2])
    with pytest.raises(TypeError):
        _crc.crc32c("text")
    with pytest.raises(OverflowError):
        _crc.crc32c(data, -1)
    with pytest.raises(OverflowError):
        _crc.crc32c(data, 2**32)


def test_threads_get_the_same_answer():
    data = os.urandom(1 << 20)
    expected = crc32c_pkg.crc32c(data)
    results = []

    def work():
        results.extend(_crc.crc32c(data) for _ in range(5))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [expected] * 20


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 10000), st.integers(0, 63), st.integers(0, 2**32 - 1))
def test_crc32c_uniform_random_lengths(n, off, seed):
    # st.binary favours short inputs; this draws lengths uniformly over 0..10000 so the
    # 1 KiB+ paths get as many examples as the short ones.
    import random

    data = random.Random(seed).randbytes(n + off)
    view = memoryview(data)[off:]
    expected = crc32c_pkg.crc32c(bytes(view), seed)
    for fn in CRC32C_FUNCS:
        assert fn(view, seed) == expected


def test_stub_matches_module():
    import ast
    import pathlib

    tree = ast.parse(pathlib.Path(_crc.__file__).with_name("_crc.pyi").read_text())
    stub = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    stub |= {n.target.id for n in tree.body if isinstance(n, ast.AnnAssign)}
    public = {n for n in dir(_crc) if not n.startswith("_")}
    assert public == stub


@pytest.mark.parametrize("fn", CRC32_FUNCS)
def test_crc32_boundary_lengths(fn):
    # The AVX-512 fold (256 bytes and more) and its 16/64/256-byte steps.
    data = os.urandom(4096 + 64)
    for n in (0, 1, 15, 16, 255, 256, 257, 271, 272, 319, 320, 511, 512, 1023, 1024, 4096):
        for off in (0, 1, 3, 7):
            chunk = memoryview(data)[off:off + n]
            assert fn(chunk, 12345) == zlib.crc32(chunk, 12345), (n, off)
