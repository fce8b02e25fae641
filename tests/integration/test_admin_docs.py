"""The python blocks of docs/admin.md run, in order, against each test broker."""
from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

DOC = Path(__file__).resolve().parents[2] / "docs" / "admin.md"


def test_admin_doc_examples_run(broker, capsys):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert blocks
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    for block in blocks:
        code = block.replace("localhost:9092", broker.bootstrap).replace('"orders"',
                                                                        repr(topic))
        exec(compile(code, str(DOC), "exec"), {})
    out = capsys.readouterr().out
    assert out.split()[0] == "86400000"    # the value the example set at creation
