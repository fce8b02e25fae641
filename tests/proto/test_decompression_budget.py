"""The decompression budget holds in memory, not only in output size, for every codec.

``decompress(codec, data, max_size)`` and ``read_batches`` promise that a payload expanding
beyond the budget raises ``DecompressionLimitError`` before more memory is spent. Each case
runs in a child process, which builds its payload, notes its resident size, decompresses,
and reports its peak resident size (VmHWM, reset after the payload is built): the growth must stay within the budget
plus a small allowance (one piece of output in flight, the codec's own buffers; for zstd
its decoding window, at most ``ZSTD_MAX_WINDOW``). A decoder that joins a list of pieces at
the end, or lets a library do so, needs twice the output and fails here.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from kafka_proto._compression import ZSTD_MAX_WINDOW

MiB = 1 << 20
BUDGET = 32 * MiB
ALLOWANCE = 4 * MiB
LZ4_MAX_BLOCK = 4 * MiB

# Builds ``payload`` (one of KINDS) for an output of ``size`` bytes, without holding that
# output in memory, then measures one decompression.
CHILD = textwrap.dedent(r"""
    import json, struct, sys, zlib
    import cramjam, lz4.frame, zstandard
    import crc32c
    from kafka_proto import compression as C
    from kafka_proto.errors import DecompressionLimitError, ProtocolDecodeError
    from kafka_proto.records import read_batches

    kind, size, budget = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    MiB = 1 << 20
    PATTERN = bytes(range(256)) * 4096  # 1 MiB, compressible, not a run of one byte

    def pieces(n):
        while n > 0:
            yield PATTERN[:min(n, MiB)]
            n -= MiB

    def gzip_member(n, level=9):
        c = zlib.compressobj(level, zlib.DEFLATED, 31)
        return b"".join([c.compress(p) for p in pieces(n)] + [c.flush()])

    def zstd_stream(n, window_log=None):
        params = zstandard.ZstdCompressionParameters.from_level(3, window_log=window_log or 0)
        c = zstandard.ZstdCompressor(compression_params=params).compressobj()
        return b"".join([c.compress(p) for p in pieces(n)] + [c.flush()])

    def lz4_stream(n, linked, block_size=lz4.frame.BLOCKSIZE_MAX64KB):
        c = lz4.frame.LZ4FrameCompressor(block_size=block_size, block_linked=linked)
        return b"".join([c.begin()] + [c.compress(p) for p in pieces(n)] + [c.flush()])

    def snappy_raw(n):
        # A raw block written by hand: one literal byte, then 64-byte copies of it.
        out = bytearray()
        u = n
        while u >= 0x80:
            out.append((u & 0x7F) | 0x80)
            u >>= 7
        out.append(u)
        out += b"\x00\x00"
        copy = bytes([(63 << 2) | 2]) + struct.pack("<H", 1)
        full, rest = divmod(n - 1, 64)
        out += copy * full
        if rest:
            out += bytes([((rest - 1) << 2) | 2]) + struct.pack("<H", 1)
        return bytes(out)

    def snappy_xerial(n):
        block = bytes(cramjam.snappy.compress_raw(PATTERN[:32768]))
        head = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
        return head + (struct.pack(">i", len(block)) + block) * (n // 32768)

    def v2_batch(codec, payload):
        after_crc = struct.pack(">hiqqqhii", codec, 0, 0, 0, -1, -1, -1, 1) + payload
        return struct.pack(">qiibI", 0, 9 + len(after_crc), -1, 2,
                           crc32c.crc32c(after_crc)) + after_crc

    KINDS = {
        "gzip": (1, lambda n: gzip_member(n)),
        # Several members: the streaming decoder, whatever the trailer says.
        "gzip-members": (1, lambda n: b"".join(gzip_member(min(8 * MiB, n - i))
                                               for i in range(0, n, 8 * MiB))),
        # A trailer claiming just under the budget: the one-shot path tries first.
        "gzip-lying-trailer": (1, lambda n: gzip_member(n)[:-4] + struct.pack("<I", budget - 1)),
        "snappy-raw": (2, snappy_raw),
        "snappy-xerial": (2, snappy_xerial),
        "lz4": (3, lambda n: lz4_stream(n, False)),
        "lz4-linked": (3, lambda n: lz4_stream(n, True)),
        "lz4-linked-4mb": (3, lambda n: lz4_stream(n, True, lz4.frame.BLOCKSIZE_MAX4MB)),
        "zstd": (4, lambda n: zstd_stream(n)),
        "zstd-frames": (4, lambda n: b"".join(zstd_stream(min(8 * MiB, n - i))
                                              for i in range(0, n, 8 * MiB))),
        "zstd-window-8mb": (4, lambda n: zstd_stream(n, 23)),
        "zstd-window-128mb": (4, lambda n: zstd_stream(n, 27)),
    }

    api = "decompress"
    if kind.startswith("batch-"):
        api, kind = "batch", kind[len("batch-"):]
    codec, make = KINDS[kind]
    payload = make(size)
    C.decompress(codec, C.compress(codec, PATTERN[:100000]))  # libraries loaded, contexts made
    if api == "batch":
        payload = v2_batch(codec, payload)
        list(read_batches(v2_batch(codec, C.compress(codec, b"x"))))

    def status(field):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024

    # Building the payload may have peaked higher than what is resident now: the peak
    # starts over here (Linux: "5" to clear_refs resets VmHWM).
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = status("VmRSS")
    try:
        if api == "batch":
            (batch,) = read_batches(payload)  # the default budget
            try:
                batch.records_list()
            except DecompressionLimitError:
                raise
            except ProtocolDecodeError:
                pass  # the payload is not records: decompressed, then refused
            result = "decompressed"
        else:
            result = len(C.decompress(codec, payload, budget))
    except DecompressionLimitError as e:
        result = "limit: " + str(e)
    peak = status("VmHWM")
    print(json.dumps({"result": result, "growth": peak - before, "payload": len(payload)}))
""")


def run_child(kind: str, size: int, budget: int = BUDGET) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, kind, str(size), str(budget)],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def allowance(kind: str) -> int:
    """What a codec's own decoder holds besides the output: zstd its window, lz4 a block
    or two (python-lz4 decodes a linked block into a buffer of its own, then copies it)."""
    if "zstd" in kind:
        return ALLOWANCE + ZSTD_MAX_WINDOW
    if "lz4" in kind:
        return ALLOWANCE + 2 * LZ4_MAX_BLOCK
    return ALLOWANCE


BOMB_KINDS = ["gzip", "gzip-members", "gzip-lying-trailer", "snappy-raw", "snappy-xerial",
              "lz4", "lz4-linked", "lz4-linked-4mb", "zstd", "zstd-frames",
              "zstd-window-8mb", "zstd-window-128mb"]


@pytest.mark.parametrize("kind", BOMB_KINDS)
def test_a_bomb_stops_at_the_budget(kind):
    got = run_child(kind, 3 * BUDGET // 2)
    assert got["result"].startswith("limit: ")
    assert got["growth"] <= BUDGET + allowance(kind), (
        f"{kind}: {got['growth'] / MiB:.1f} MiB for a {BUDGET / MiB:.0f} MiB budget")


# Within the budget: memory is the output (plus the allowance), not twice the output.
FITTING_KINDS = ["gzip", "gzip-members", "snappy-raw", "snappy-xerial", "lz4", "lz4-linked",
                 "lz4-linked-4mb", "zstd", "zstd-frames", "zstd-window-8mb"]


@pytest.mark.parametrize("kind", FITTING_KINDS)
def test_output_within_the_budget_costs_the_output(kind):
    size = BUDGET - 2 * MiB
    got = run_child(kind, size)
    assert got["result"] == size
    assert got["growth"] <= size + allowance(kind), (
        f"{kind}: {got['growth'] / MiB:.1f} MiB for {size / MiB:.0f} MiB of output")


def test_window_above_the_limit_is_refused_with_its_size():
    got = run_child("zstd-window-128mb", MiB)
    assert got["result"].startswith("limit: zstd frame needs a decoding window of 134217728")


@pytest.mark.parametrize("kind", ["gzip", "snappy-raw", "lz4", "zstd"])
def test_batch_reader_holds_its_default_budget(kind):
    # read_batches' default: the larger of 64 MiB and 64 times the compressed size. Bombs of
    # 256 MiB are a few hundred KiB, so 64 MiB; snappy expands at most about 21-fold, so a
    # snappy batch never reaches 64 times its size: 96 MiB from 4.5 MiB are decompressed,
    # in 96 MiB of memory.
    size = 256 * MiB if kind != "snappy-raw" else 96 * MiB
    got = run_child("batch-" + kind, size)
    default = max(64 * MiB, 64 * (got["payload"] - 61))
    if size > default:
        assert got["result"].startswith("limit: ")
    assert got["growth"] <= min(size, default) + allowance(kind), (
        f"{kind}: {got['growth'] / MiB:.1f} MiB for a {default / MiB:.0f} MiB budget")
