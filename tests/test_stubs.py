"""The ``.pyi`` stubs of the compiled (Cython) modules against the modules themselves.

Type checkers read only the stub of a compiled module, so a stub that drifts (a name the
module no longer has, a renamed argument, a class that cannot be subclassed shown as one
that can) misleads every checked program silently. mypy's ``stubtest`` imports each
module and compares it with its stub: public names, classes, methods, argument names and
kinds, ``@final``. It sees a compiled function's arguments through ``__text_signature__``,
which setup.py has Cython write (``embedsignature.format = "clinic"``); the second test
keeps that true, else stubtest would skip every signature without a word.
Skipped when mypy is not installed in this interpreter (stubtest imports the modules).
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import subprocess
import sys
import types
from pathlib import Path
from typing import List

import pytest

ROOT = Path(__file__).resolve().parent.parent
STUBTEST_TIMEOUT = 300

# What stubtest would report that is not a mismatch of ours, each with why.
ALLOWED = [
    # Cython's doctest dictionary and C-API capsule table: module internals, not API
    r".*\.__test__",
    r"kafka_proto\._crc\.__pyx_capi__",
    # BatchHeader() raises TypeError whatever it is given (headers come from
    # read_batch_header): the stub keeps object's __init__ rather than promise *args
    r"kafka_proto\.records\._v2\.BatchHeader\.__init__",
]
if sys.version_info < (3, 12):
    # The buffer protocol shows as a __buffer__ method from Python 3.12 (PEP 688); the
    # stub declares it so that checkers take an OutputBuffer where a buffer goes.
    ALLOWED.append(r"kafka_proto\._compression\.OutputBuffer\.__buffer__")


def compiled_modules() -> List[str]:
    """Every Cython module of the two packages, by its dotted name."""
    found = sorted(p.relative_to(ROOT).with_suffix("")
                   for pkg in ("kafka_client", "kafka_proto") for p in (ROOT / pkg).rglob("*.pyx"))
    return [".".join(p.parts) for p in found]


def test_every_compiled_module_has_a_stub():
    modules = compiled_modules()
    assert "kafka_client.producer._core" in modules and len(modules) >= 7, modules
    missing = [m for m in modules if not (ROOT / (m.replace(".", "/") + ".pyi")).is_file()]
    assert missing == []


def test_compiled_functions_and_methods_show_their_signatures():
    """Without a signature stubtest cannot compare arguments; every public function and
    method of the compiled modules has one (Cython's special methods excepted)."""
    checked, unreadable = 0, []
    for name in compiled_modules():
        module = importlib.import_module(name)
        for attr, obj in vars(module).items():
            callables = []
            if isinstance(obj, types.BuiltinFunctionType) and obj.__module__ == name:
                callables.append((attr, obj))
            elif isinstance(obj, type) and obj.__module__ == name:
                callables.extend((f"{attr}.{m}", f) for m, f in vars(obj).items()
                                 if isinstance(f, types.MethodDescriptorType)
                                 and not (m.startswith("__") and m.endswith("__")))
            for qualname, func in callables:
                if qualname.split(".")[-1].startswith("_"):
                    continue
                checked += 1
                try:
                    inspect.signature(func)
                except ValueError:
                    unreadable.append(f"{name}.{qualname}")
    assert checked >= 100 and unreadable == [], (checked, unreadable)


def test_stubs_match_the_compiled_modules(tmp_path):
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed in this interpreter (pip install mypy)")
    allowlist = tmp_path / "allowlist.txt"
    allowlist.write_text("\n".join(ALLOWED) + "\n")
    # PEP 800's @disjoint_base (a C-layout class) is newer than the typeshed of some mypy
    # versions pyproject.toml allows: not asked of the stubs.
    command = [sys.executable, "-m", "mypy.stubtest", "--mypy-config-file", "pyproject.toml",
               "--allowlist", str(allowlist), "--concise"]
    if "--ignore-disjoint-bases" in _stubtest_help():
        command.append("--ignore-disjoint-bases")
    result = subprocess.run(command + compiled_modules(), cwd=ROOT, capture_output=True,
                            text=True, timeout=STUBTEST_TIMEOUT)
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]


def _stubtest_help() -> str:
    return subprocess.run([sys.executable, "-m", "mypy.stubtest", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60).stdout
