"""The order the suite's files run in (tests/conftest.py): the longest first, each file's
tests together and in their order."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import conftest

ROOT = Path(__file__).resolve().parent.parent


def test_every_longest_file_exists():
    missing = [path for path in conftest.LONGEST_FIRST if not (ROOT / path).is_file()]
    assert missing == []


def test_run_order_puts_the_longest_first_then_most_tests_first():
    longest = conftest.LONGEST_FIRST[1]
    ids = ["tests/a.py::x", f"{longest}::p", "tests/b.py::y1", "tests/a.py::z",
           "tests/b.py::y2", f"{longest}::q", "tests/b.py::y3"]
    items = [SimpleNamespace(nodeid=i) for i in ids]
    order = [item.nodeid for item in conftest._run_order(items)]
    assert order == [f"{longest}::p", f"{longest}::q", "tests/b.py::y1", "tests/b.py::y2",
                     "tests/b.py::y3", "tests/a.py::x", "tests/a.py::z"]
