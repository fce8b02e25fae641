"""The python blocks of docs/transactions.md run, in order, against each test broker (in a
child process with a hard timeout: ``run_doc``); the loop's output is then checked in the
log itself (COMMIT/ABORT markers), which works on Tansu too."""
from __future__ import annotations

import uuid

import pytest

from test_transactions import log_view  # tests/integration/test_transactions.py

pytestmark = pytest.mark.integration


def test_transactions_doc_examples_run(broker, run_doc):
    run = uuid.uuid4().hex[:8]
    names = {name: f"{name}-{run}" for name in ("orders", "orders-enriched", "orders-loader",
                                                "enricher", "enricher-1", "checker")}
    # The session's brokers are shared: names of this run's own. Tansu holds a group's
    # first join for half the session timeout (22.5 s at the default 45 s): the examples'
    # consumers get 6 s here, not in the docs.
    replace = {"localhost:9092": broker.bootstrap,
               "Consumer({": 'Consumer({"session.timeout.ms": 6000, '}
    replace.update({f'"{name}"': repr(unique) for name, unique in names.items()})
    out = run_doc("docs/transactions.md", replace)
    assert "not valid in transaction state Ready" in out.stdout
    views = [log_view(broker, names["orders-enriched"], p) for p in range(3)]
    for p, view in enumerate(views):
        assert view.committed == [b"enriched:order-%d" % i for i in range(p, 1000, 3)]
        assert not view.open
