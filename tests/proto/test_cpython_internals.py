"""The CPython internals of kafka_proto (kafka_proto/_c/cpython_internals.h) are used only on
the interpreters they were verified on, KAFKA_NATIVE_PLAIN=1 switches them off, and the
record codec's tests pass on both paths (the other path's run is a child process)."""
from __future__ import annotations

import gc
import os
import platform
import subprocess
import sys
import sysconfig
import types
from pathlib import Path

import pytest

from kafka_proto.records import (
    FAST_PATH,
    Record,
    RecordBatchBuilder,
    RecordFactory,
    read_batches,
)

# Where the internals were verified (the header's KP_INTERNALS_VERIFIED, kept in step).
VERIFIED = {(3, 9), (3, 10), (3, 11), (3, 12), (3, 13)}
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def verified_interpreter() -> bool:
    return (platform.python_implementation() == "CPython"
            and sys.version_info[:2] in VERIFIED
            and not sysconfig.get_config_var("Py_GIL_DISABLED"))


def fast_expected(plain_setting: str) -> bool:
    return verified_interpreter() and plain_setting in ("", "0")


def test_path_follows_the_interpreter_and_the_environment():
    assert FAST_PATH is fast_expected(os.environ.get("KAFKA_NATIVE_PLAIN", ""))


def test_each_path_shows_in_the_objects_it_makes():
    b = RecordBatchBuilder()
    b.append(b"v", b"k", 5)
    (batch,) = read_batches(b.build())

    class Msg:
        __slots__ = ("v",)

    out = []
    batch.decode_into(out, RecordFactory(Msg, offset=None, key=None, value="v", headers=None,
                                         timestamp=None), "t", 0)
    key_descr = type(Record.__dict__["key"])
    if FAST_PATH:
        assert key_descr is types.MemberDescriptorType and not gc.is_tracked(out[0])
        assert RecordBatchBuilder.append.__text_signature__ == (
            "($self, /, value, key=None, timestamp=None, headers=None)")
    else:
        assert key_descr is types.GetSetDescriptorType and gc.is_tracked(out[0])
    assert out[0].v == b"v" and list(batch)[0].key == b"k"


def test_methods_refuse_a_foreign_self():
    # A method of the codec's classes called through the class with something else as self
    # is a TypeError, not a read of that object's memory as a builder's.
    with pytest.raises(TypeError):
        RecordBatchBuilder.append(object(), b"x")
    with pytest.raises(TypeError):
        RecordBatchBuilder.build(object())


@pytest.mark.parametrize("setting", ["1", "yes", "0", ""])
def test_environment_variable_at_import(setting):
    env = dict(os.environ, KAFKA_NATIVE_PLAIN=setting)
    out = subprocess.run([sys.executable, "-c",
                          "import kafka_proto.records as r; print(r.FAST_PATH)"],
                         env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(fast_expected(setting))


@pytest.mark.skipif(os.environ.get("KAFKA_NATIVE_OTHER_PATH_RUN") == "1",
                    reason="this is the other path's run")
@pytest.mark.skipif(not verified_interpreter(), reason="only the plain path exists here")
def test_record_codec_tests_pass_on_the_other_path():
    other = "0" if os.environ.get("KAFKA_NATIVE_PLAIN", "") not in ("", "0") else "1"
    env = dict(os.environ, KAFKA_NATIVE_PLAIN=other, KAFKA_NATIVE_OTHER_PATH_RUN="1")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:warnings",
         str(HERE / "records"), str(Path(__file__))],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout.splitlines()[-1]
