"""The committed generated code matches what the generators make from ../shared now."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "kafka-protocol"
GENERATED = ROOT / "kafka_proto" / "messages" / "_generated"
ERROR_TABLE = ROOT / "kafka_proto" / "_error_table.py"

pytestmark = pytest.mark.skipif(
    not (SHARED / "messages").is_dir(),
    reason=f"protocol schemas not found at {SHARED} (../shared relative to the repository root)",
)


def load_tool(name):
    spec = importlib.util.spec_from_file_location(f"_tool_{name}", ROOT / "tools" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def test_messages_up_to_date(tmp_path):
    gen = load_tool("gen_messages")
    out = tmp_path / "generated"
    gen.generate(SHARED / "messages", out)
    # the modules and classes.pyi, the classes' index for type checkers
    fresh = {p.name: p.read_bytes() for p in out.glob("*.py*")}
    committed = {p.name: p.read_bytes() for p in GENERATED.glob("*.py*")}
    assert sorted(fresh) == sorted(committed), "module set differs: rerun tools/gen_messages.py"
    stale = [name for name in sorted(fresh) if fresh[name] != committed[name]]
    assert not stale, f"out of date: {stale}; rerun tools/gen_messages.py"
    header = gen.HEADER_LINE.encode() + b"\n"
    assert all(data.startswith(header) for data in committed.values())


def test_generation_is_deterministic(tmp_path):
    gen = load_tool("gen_messages")
    gen.generate(SHARED / "messages", tmp_path / "a")
    gen.generate(SHARED / "messages", tmp_path / "b")
    for p in sorted((tmp_path / "a").glob("*.py")):
        assert p.read_bytes() == (tmp_path / "b" / p.name).read_bytes()


def test_error_table_up_to_date(tmp_path):
    gen = load_tool("gen_errors")
    out = tmp_path / "_error_table.py"
    gen.generate(SHARED / "errors.tsv", out)
    assert out.read_bytes() == ERROR_TABLE.read_bytes(), "rerun tools/gen_errors.py"
    assert ERROR_TABLE.read_text().startswith(gen.HEADER_LINE + "\n")


def test_no_schema_prose_in_generated_code():
    # The schemas' "about" texts must not leak into the project; spot-check a few phrases.
    text = "".join(p.read_text() for p in GENERATED.glob("*.py"))
    phrases = ("The topics to fetch", "The broker ID of the follower", "Licensed to the Apache")
    for phrase in phrases:
        assert phrase not in text
