"""A method of the codec's compiled classes, called through its class with something else as
``self``, raises TypeError instead of reading that object's memory as its own (Cython's
``binding=True`` methods do not check ``self``: cython/cython#6127; setup.py compiles every
extension with ``binding=False``, whose method descriptors do). The producer's compiled core
is checked too: it is the same build. Run in a child process, since
the failure this guards against is a crash."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

CHILD = textwrap.dedent("""
    import importlib, inspect, sys
    from pathlib import Path
    names = [".".join(p.with_suffix("").parts) for root in ("kafka_proto", "kafka_client")
             for p in sorted(Path(root).rglob("*.pyx"))]
    checked = []
    for module in map(importlib.import_module, names):
        for cls in vars(module).values():
            # Compiled classes are static types (Py_TPFLAGS_HEAPTYPE clear).
            if not (inspect.isclass(cls) and cls.__module__ == module.__name__
                    and not cls.__flags__ & (1 << 9)):
                continue
            for name, attr in vars(cls).items():
                if name.startswith("__") or isinstance(attr, (staticmethod, classmethod)) \\
                        or not callable(attr) or type(attr).__name__ == "builtin_function_or_method":
                    continue
                try:
                    attr(object())
                except TypeError:
                    checked.append(f"{cls.__name__}.{name}")
                    continue
                print(f"{cls.__name__}.{name} ran with a foreign self")
                sys.exit(1)
    print(" ".join(checked))
""")


def test_methods_check_self():
    proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                          timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    checked = set(proc.stdout.split())
    assert {"RecordBatchBuilder.append", "RecordBatchBuilder.build", "RecordBatch.decode_into",
            "RecordBatch.validate_crc", "ColumnBuilder.finish", "LegacyBatch.records_list",
            "OutputBuffer.take", "Reader.read_int8", "Writer.write_int32",
            "AccumulatorCore.produce"} <= checked
