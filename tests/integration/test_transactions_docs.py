"""The python blocks of docs/transactions.md run, in order, against each test broker; the
loop's output is then checked in the log itself (COMMIT/ABORT markers), which works on
Tansu too."""
from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest

from test_transactions import log_view  # tests/integration/test_transactions.py

pytestmark = pytest.mark.integration

DOC = Path(__file__).resolve().parents[2] / "docs" / "transactions.md"


def test_transactions_doc_examples_run(broker, capsys):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) >= 4
    run = uuid.uuid4().hex[:8]
    names = {name: f"{name}-{run}" for name in ("orders", "orders-enriched", "orders-loader",
                                                "enricher", "enricher-1", "checker")}
    namespace = {}
    for block in blocks:
        code = block.replace("localhost:9092", broker.bootstrap)
        for name, unique in sorted(names.items(), key=lambda kv: -len(kv[0])):
            code = code.replace(f'"{name}"', repr(unique))
        # Tansu holds a group's first join for half the session timeout (22.5 s at the
        # default 45 s): the examples' consumers get 6 s here, not in the docs.
        code = code.replace("Consumer({", 'Consumer({"session.timeout.ms": 6000, ')
        exec(compile(code, str(DOC), "exec"), namespace)
    out = capsys.readouterr().out
    assert "not valid in transaction state Ready" in out
    views = [log_view(broker, names["orders-enriched"], p) for p in range(3)]
    for p, view in enumerate(views):
        assert view.committed == [b"enriched:order-%d" % i for i in range(p, 1000, 3)]
        assert not view.open
