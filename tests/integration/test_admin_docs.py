"""The python blocks of docs/admin.md run, in order, against each test broker (in a child
process with a hard timeout: ``run_doc``)."""
from __future__ import annotations

import uuid

import pytest

pytestmark = pytest.mark.integration


def test_admin_doc_examples_run(broker, run_doc):
    topic = f"orders-{uuid.uuid4().hex[:8]}"     # the session's broker is shared
    out = run_doc("docs/admin.md", {"localhost:9092": broker.bootstrap,
                                    '"orders"': repr(topic)})
    assert out.stdout.split()[0] == "86400000"    # the value the example set at creation
