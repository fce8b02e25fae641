"""The public API's type hints, as a user's type checker sees them (the packages ship
``py.typed``, so checkers trust the hints).

mypy checks tests/typed_user_program.py, written as docs/*.md write programs, with
``--strict`` against this tree's kafka_client and kafka_proto: every name it imports must
have a real type and its ``assert_type`` calls pin what the documented calls return.
The packages' own code passes mypy with the repository's configuration too.
Skipped when mypy is not installed (in this interpreter, or ``mypy`` on PATH).
"""
from __future__ import annotations

import hashlib
import importlib.util
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import List

import pytest

ROOT = Path(__file__).resolve().parent.parent
USER_PROGRAM = ROOT / "tests" / "typed_user_program.py"
# A cold run analyses the whole package (about 15 s here); the cache keeps later runs
# short. Outside the repository, one per checkout.
CACHE_DIR = (Path(tempfile.gettempdir())
             / f"kafka-client-mypy-{hashlib.sha1(str(ROOT).encode()).hexdigest()[:12]}")
MYPY_TIMEOUT = 300


def _mypy_command() -> List[str]:
    if importlib.util.find_spec("mypy") is not None:
        return [sys.executable, "-m", "mypy"]
    found = shutil.which("mypy")
    if found is None:
        pytest.skip("mypy is not installed (pip install mypy, or put mypy on PATH)")
    return [found]


def run_mypy(program: Path, workdir: Path) -> subprocess.CompletedProcess:
    """mypy --strict on ``program``, the packages as a user's installed ones: their own
    errors are not reported (follow_imports=silent), only the program's."""
    config = workdir / "mypy.ini"
    config.write_text("[mypy]\n")        # no configuration file of the user's or the repo's
    command = _mypy_command() + [
        "--config-file", str(config), "--strict", "--follow-imports=silent",
        "--cache-dir", str(CACHE_DIR), "--python-executable", sys.executable,
        "--no-color-output", "--no-error-summary", str(program)]
    # MYPYPATH first: this tree, not a kafka-native installed in site-packages
    env = {"MYPYPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(workdir)}
    return subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True,
                          timeout=MYPY_TIMEOUT)


def test_the_documented_api_type_checks_clean(tmp_path):
    result = run_mypy(USER_PROGRAM, tmp_path)
    assert (result.returncode, result.stdout) == (0, ""), result.stdout + result.stderr


def test_a_wrong_use_of_the_api_is_reported(tmp_path):
    """The harness sees our types: a program that misuses them fails, at the lines
    concerned (were the packages Any to mypy, every line would pass)."""
    program = tmp_path / "wrong.py"
    program.write_text(
        "from kafka_client import Consumer, KafkaError, Producer, TopicPartition\n"
        "Consumer({'bootstrap.servers': 'b'}).assign(['topic'])\n"
        "code: str = KafkaError._PARTITION_EOF\n"
        "# a tuple: the consumer raises TypeError for anything but a list\n"
        "Consumer({'bootstrap.servers': 'b'}).assign((TopicPartition('t', 0),))\n"
        "Producer({'bootstrap.servers': 'b'}).produce('t', b'v', on_delivery=lambda err: 0)\n"
        "import kafka_client, kafka_proto.messages\n"
        "print(kafka_client.Prodcer, kafka_proto.messages.FetchRequst)\n")
    result = run_mypy(program, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = sorted({line.split(":")[1] for line in result.stdout.splitlines()
                    if ": error:" in line})
    assert lines == ["2", "3", "5", "6", "8"], result.stdout
    assert "TopicPartition" in result.stdout


def test_the_packages_own_code_type_checks_clean():
    """kafka_client and kafka_proto with the repository's ``[tool.mypy]`` configuration
    (pyproject.toml: mypy's default checks): a wrong type inside the packages is a defect
    waiting for its path (290 errors were cleaned up on 2026-11-30, a few of them real)."""
    command = _mypy_command() + [
        "--cache-dir", f"{CACHE_DIR}-packages", "--python-executable", sys.executable,
        "--no-color-output"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                            timeout=MYPY_TIMEOUT)
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
