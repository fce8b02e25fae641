"""Declares the Cython extensions; all metadata lives in pyproject.toml.

Every ``.pyx`` under ``kafka_proto/`` (the codec) and ``kafka_client/`` (only the
producer's per-message path, see kafka_client/producer/_core.pyx) becomes an extension
module named after its path, so adding a module needs no edit here.
"""
import fnmatch
import os
import sys
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup

ROOT = Path(__file__).parent
C_HELPERS = ROOT / "kafka_proto" / "_c"


def _extensions():
    extra_compile = ["-O3"] if sys.platform != "win32" else ["/O2"]
    if os.environ.get("KAFKA_PROTO_COVERAGE"):
        # For fuzzing with coverage feedback (see docs/fuzzing.md).
        extra_compile += ["-fsanitize=fuzzer-no-link"]
    # KAFKA_PROTO_ONLY="kafka_proto/records/*" builds a subset (parallel work on one tree).
    only = os.environ.get("KAFKA_PROTO_ONLY")
    exts = []
    sources = sorted((ROOT / "kafka_proto").rglob("*.pyx")) + sorted(
        (ROOT / "kafka_client").rglob("*.pyx"))
    for pyx in sources:
        rel = pyx.relative_to(ROOT).with_suffix("")
        if only and not fnmatch.fnmatch(rel.as_posix(), only):
            continue
        name = ".".join(rel.parts)
        exts.append(
            Extension(
                name,
                [str(pyx.relative_to(ROOT))],
                include_dirs=[str(C_HELPERS.relative_to(ROOT))],
                extra_compile_args=extra_compile,
            )
        )
    return exts


setup(
    ext_modules=cythonize(
        _extensions(),
        language_level=3,
        compiler_directives={
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
            "embedsignature": True,
            # as __text_signature__: inspect.signature (and mypy's stubtest, which checks
            # the .pyi stubs against these modules in tests/test_stubs.py) reads it
            "embedsignature.format": "clinic",
            # A method called through its class with an object of another type as self
            # must raise TypeError, not read that object's memory (cython/cython#6127).
            "binding": False,
        },
        nthreads=os.cpu_count() or 1,
        # `build_ext --force` (./dev passes it when setup.py changed): regenerate the C
        # too, so changed directives reach modules whose .pyx did not change.
        force="--force" in sys.argv,
    ),
)
