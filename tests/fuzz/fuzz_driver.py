"""Corpus access and a small deterministic mutator, for running the harnesses without atheris.

``run(name, seconds, seed)`` replays the committed corpus of one harness, then feeds it
mutated inputs (bit flips, interesting integers, inserts, deletes, duplicated slices,
splices with other corpus entries) until the time budget or the iteration cap is used. Each
input must finish within ``input_seconds`` and the process' peak RSS must stay under
``rss_limit_mb``; any other outcome raises :class:`FuzzFailure` carrying the input.
"""
from __future__ import annotations

import hashlib
import random
import resource
import time
from pathlib import Path
from typing import Callable, List, NamedTuple, Optional

CORPUS_DIR = Path(__file__).resolve().parent / "corpus"

_INTERESTING_8 = (0, 1, 0x7F, 0x80, 0xFF)
_INTERESTING_32 = (0, 1, -1, 0x7FFFFFFF, -0x80000000, 0xFFFF, 0x10000, 61, 1 << 24)


class FuzzFailure(AssertionError):
    """A harness failed on an input (kept in ``data``)."""

    def __init__(self, harness: str, data: bytes, what: str) -> None:
        super().__init__(f"{harness}: {what} on input {data[:64].hex()}... "
                         f"({len(data)} bytes, sha1 {hashlib.sha1(data).hexdigest()[:16]})")
        self.harness = harness
        self.data = data


class RunStats(NamedTuple):
    harness: str
    inputs: int
    seconds: float
    slowest: float


def load_corpus(name: str) -> List[bytes]:
    """The committed seed inputs of one harness, in a stable order."""
    folder = CORPUS_DIR / name
    if not folder.is_dir():
        return []
    return [p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()]


def mutate(data: bytes, rng: random.Random, corpus: List[bytes]) -> bytes:
    """One to four random edits of ``data``."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(8)
        n = len(buf)
        if op == 0 and n:  # flip a bit
            i = rng.randrange(n)
            buf[i] ^= 1 << rng.randrange(8)
        elif op == 1 and n:  # interesting byte
            buf[rng.randrange(n)] = rng.choice(_INTERESTING_8)
        elif op == 2 and n >= 4:  # interesting int32 (lengths, counts, sizes)
            i = rng.randrange(n - 3)
            v = rng.choice(_INTERESTING_32) & 0xFFFFFFFF
            buf[i:i + 4] = v.to_bytes(4, rng.choice(("big", "little")))
        elif op == 3:  # insert random bytes
            i = rng.randrange(n + 1)
            buf[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op == 4 and n:  # delete a slice
            i = rng.randrange(n)
            del buf[i:i + rng.randint(1, 16)]
        elif op == 5 and n:  # duplicate a slice
            i = rng.randrange(n)
            j = min(n, i + rng.randint(1, 64))
            k = rng.randrange(n + 1)
            buf[k:k] = buf[i:j]
        elif op == 6 and corpus:  # splice with another seed
            other = rng.choice(corpus)
            if other:
                i = rng.randrange(n + 1)
                j = rng.randrange(len(other))
                buf = buf[:i] + other[j:]
        elif op == 7 and n:  # small arithmetic on a byte
            i = rng.randrange(n)
            buf[i] = (buf[i] + rng.choice((-2, -1, 1, 2))) & 0xFF
    return bytes(buf)


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def run_one(name: str, check: Callable[[bytes], None], data: bytes,
            input_seconds: float) -> float:
    """Run one input; return its duration. Raises FuzzFailure on any failure.

    An input over ``input_seconds`` is run once more and fails only if it is slow again:
    an input that is slow by itself is slow every time, while a loaded machine (CI's two
    cores shared with brokers and Spark) stretches one run now and then."""
    took = _timed(name, check, data)
    if took > input_seconds:
        again = _timed(name, check, data)
        if again > input_seconds:
            raise FuzzFailure(name, data, f"took {took:.2f}s, then {again:.2f}s "
                                          f"(limit {input_seconds}s)")
        took = again
    return took


def _timed(name: str, check: Callable[[bytes], None], data: bytes) -> float:
    start = time.perf_counter()
    try:
        check(data)
    except Exception as exc:  # noqa: BLE001 - every escape is a finding
        raise FuzzFailure(name, data, f"{type(exc).__name__}: {exc}") from exc
    return time.perf_counter() - start


def run(name: str, check: Callable[[bytes], None], seconds: float, seed: int = 0, *,
        max_inputs: Optional[int] = None, min_inputs: int = 0, input_seconds: float = 2.0,
        rss_limit_mb: float = 1024.0, corpus: Optional[List[bytes]] = None) -> RunStats:
    """Corpus replay, then mutation until ``seconds`` or ``max_inputs`` are used up, and
    in any case until ``min_inputs`` (corpus included) have run: a smoke run that must
    reach the mutations whatever the machine's load."""
    if corpus is None:
        corpus = load_corpus(name)
    rng = random.Random(seed)
    pool = list(corpus) or [b"\x00" * 8]
    start = time.perf_counter()
    slowest = 0.0
    count = 0
    for data in corpus:
        slowest = max(slowest, run_one(name, check, data, input_seconds))
        count += 1
    while count < min_inputs or (time.perf_counter() - start < seconds
                                 and (max_inputs is None or count < max_inputs)):
        data = mutate(rng.choice(pool), rng, corpus)
        slowest = max(slowest, run_one(name, check, data, input_seconds))
        count += 1
        if rng.random() < 0.02 and len(pool) < 512:
            pool.append(data)  # stack mutations now and then
        if count % 256 == 0 and _rss_mb() > rss_limit_mb:
            raise FuzzFailure(name, data, f"peak RSS {_rss_mb():.0f} MB over {rss_limit_mb} MB")
    return RunStats(name, count, time.perf_counter() - start, slowest)
