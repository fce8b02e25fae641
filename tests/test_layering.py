"""The layering rule, checked on the source: kafka_client imports only public names of
kafka_proto (no ``kafka_proto._x`` module, no ``kafka_proto.records._v2``, no
``kafka_proto.messages._generated``, no ``_name`` from a kafka_proto module), and
kafka_proto never imports kafka_client. Every .py file is parsed with ``ast``; .pyx files
(Cython syntax) by their import statements, parenthesised continuations included."""
from __future__ import annotations

import ast
import re
from functools import lru_cache
from pathlib import Path
from typing import Iterator, List, NamedTuple, Tuple


ROOT = Path(__file__).resolve().parent.parent



class Import(NamedTuple):
    """One imported module, or one name imported from a module (``module.name``)."""

    path: str
    line: int
    target: str


def _private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def is_private_kafka_proto(target: str) -> bool:
    parts = target.split(".")
    return parts[0] == "kafka_proto" and any(_private(p) for p in parts[1:])


def _py_imports(source: str) -> Iterator[Tuple[int, str]]:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.lineno, node.module
            for alias in node.names:
                yield node.lineno, f"{node.module}.{alias.name}"
        elif (isinstance(node, ast.Call) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and getattr(node.func, "attr", getattr(node.func, "id", None))
              in ("import_module", "__import__")):
            yield node.lineno, node.args[0].value


_PYX_FROM = re.compile(r"^\s*from\s+([\w.]+)\s+c?import\s+(.*)$")
_PYX_IMPORT = re.compile(r"^\s*c?import\s+(.*)$")


def _pyx_imports(source: str) -> Iterator[Tuple[int, str]]:
    lines = source.splitlines()
    i = 0
    while i < len(lines):
        lineno, text = i + 1, lines[i].split("#")[0]
        i += 1
        if "(" in text:  # names over several lines, up to the closing parenthesis
            while ")" not in text and i < len(lines):
                text += " " + lines[i].split("#")[0]
                i += 1
        names = lambda rest: [n.split(" as ")[0].strip()  # noqa: E731
                              for n in rest.replace("(", " ").replace(")", " ").split(",")
                              if n.strip()]
        m = _PYX_FROM.match(text)
        if m:
            yield lineno, m.group(1)
            for name in names(m.group(2)):
                yield lineno, f"{m.group(1)}.{name}"
            continue
        m = _PYX_IMPORT.match(text)
        if m:
            for name in names(m.group(1)):
                yield lineno, name


def imports_of(path: Path) -> List[Import]:
    source = path.read_text(encoding="utf-8")
    found = _pyx_imports(source) if path.suffix == ".pyx" else _py_imports(source)
    rel = path.relative_to(ROOT).as_posix()
    return [Import(rel, line, target) for line, target in found]


def sources(package: str) -> List[Path]:
    base = ROOT / package
    return sorted(p for p in base.rglob("*") if p.suffix in (".py", ".pyx"))


@lru_cache(maxsize=None)
def package_imports(package: str) -> Tuple[Import, ...]:
    return tuple(imp for path in sources(package) for imp in imports_of(path))


def client_private_imports() -> List[Import]:
    return [imp for imp in package_imports("kafka_client") if is_private_kafka_proto(imp.target)]


def _by_module(found: List[Import]) -> set:
    """(file, kafka_proto module) pairs; ``from kafka_proto import _crc`` counts once."""
    out = set()
    for imp in found:
        parts = imp.target.split(".")
        first = next(i for i, p in enumerate(parts) if i and _private(p))
        out.add((imp.path, ".".join(parts[:first + 1])))
    return out


def test_the_scanner_finds_every_import_form(tmp_path):
    py = tmp_path / "m.py"
    py.write_text(
        "import kafka_proto._wire\n"
        "from kafka_proto import _crc, framing\n"
        "from kafka_proto.records._v2 import RecordBatchBuilder\n"
        "def f():\n"
        "    from kafka_proto.messages import _generated as g\n"
        "    importlib.import_module('kafka_proto._hash')\n"
        "from kafka_proto.errors import __doc__, ErrorCode\n"
        "from . import _local\n")
    pyx = tmp_path / "m.pyx"
    pyx.write_text(
        "cimport cython\n"
        "from kafka_proto._crc cimport crc32_update\n"
        "from kafka_proto.records import (\n"
        "    RecordBatchBuilder,  # comment\n"
        "    _v2 as v2)\n"
        "cdef int x = 0\n"
        "import kafka_proto.framing, kafka_proto._wire as w\n")
    got = []
    for path in (py, pyx):
        source = path.read_text()
        found = _pyx_imports(source) if path.suffix == ".pyx" else _py_imports(source)
        got += sorted((line, t) for line, t in found if is_private_kafka_proto(t))
    assert got == [
        (1, "kafka_proto._wire"), (2, "kafka_proto._crc"), (3, "kafka_proto.records._v2"),
        (3, "kafka_proto.records._v2.RecordBatchBuilder"),
        (5, "kafka_proto.messages._generated"), (6, "kafka_proto._hash"),
        (2, "kafka_proto._crc"), (2, "kafka_proto._crc.crc32_update"),
        (3, "kafka_proto.records._v2"), (7, "kafka_proto._wire"),
    ]


def test_the_scanner_reads_the_whole_client():
    files = sources("kafka_client")
    assert any(p.suffix == ".pyx" for p in files)  # the producer's compiled core
    assert len(files) > 20
    seen = {imp.target for imp in package_imports("kafka_client")}
    assert "kafka_proto.framing.DEFAULT_MAX_FRAME_SIZE" in seen  # a public import, seen


def test_client_imports_no_private_kafka_proto_module():
    found = client_private_imports()
    assert found == [], "\n".join(f"{i.path}:{i.line}: {i.target}" for i in found)


def test_kafka_proto_never_imports_kafka_client():
    found = [imp for imp in package_imports("kafka_proto")
             if imp.target.split(".")[0] == "kafka_client"]
    assert found == []


def test_guide_examples_import_no_private_kafka_proto_module(doc_python_blocks):
    """What the guides show users is public: their examples import kafka_proto's public
    modules (``kafka_proto.wire``, not the compiled ``kafka_proto._wire`` behind it)."""
    found = []
    for doc in sorted((ROOT / "docs").glob("*.md")):
        rel = doc.relative_to(ROOT).as_posix()
        for first_line, code in doc_python_blocks(rel):
            found += [f"{rel}:{first_line + line}: {target}"
                      for line, target in _py_imports(code) if is_private_kafka_proto(target)]
    assert found == [], "\n".join(found)


def test_benchmarks_import_no_private_kafka_proto_module():
    """The benchmarks measure what users call."""
    found = [imp for imp in package_imports("benchmarks") if is_private_kafka_proto(imp.target)]
    assert found == [], "\n".join(f"{i.path}:{i.line}: {i.target}" for i in found)
