"""The python blocks of the guides run as the guides say they do: in order, in one
interpreter (a child process, with a hard timeout), against a one-broker
``kafka_client.testing.Cluster`` of the test's own where they need a broker, with only the
bootstrap address substituted. What the text says they do is then checked on the broker's
side (messages in each topic) or in their output; a ``print`` whose comment says what it
shows (``print(x)   # (0, 100)``, ``...`` or ``<a description>`` for what varies) is
checked by ``run_doc`` itself. tests/test_docs_blocks.py checks that every guide with
python blocks (docs/*.md, README.md) is run by a test.

admin.md and transactions.md have their own tests (test_admin_docs.py,
test_transactions_docs.py); spark.md's blocks run on the Spark session of
tests/integration/spark/test_spark_stream.py; the names the guides use are checked by
tests/test_docs_names.py. Not run, with the reason:

* testing.md's ``...`` placeholders: replaced by test code that does what their comment
  says (``TESTING_PRELUDE``); the rest of those blocks runs as written;
* testing.md's command lines run in tests/testing/test_cluster_cli_docs.py;
* the plain ``` blocks (not python): import swaps (``from confluent_kafka import ...  #
  before``), call signatures, diagrams, the codec's exception tree;
* README.md's and index.md's ``./dev`` lines: ``./dev test`` is this suite, ``./dev demo``
  is run by test_demo.py (``python -m kafka_client.demo``), ``./dev bench``/``build``/
  ``gen`` set up or measure rather than show behaviour;
* ``python -m kafka_client.config --markdown`` (configuration.md): run by
  tests/client/test_config.py.
"""
from __future__ import annotations

import pytest

from kafka_client.testing import Cluster

pytestmark = pytest.mark.integration


@pytest.fixture
def cluster(tmp_path):
    """A one-broker test cluster of this test's own: the guides' fixed topic and group
    names start from nothing, as they assume."""
    with Cluster(brokers=1, data_dir=str(tmp_path / "cluster")) as one_broker:
        yield one_broker


def messages_in(cluster: Cluster, topic: str) -> int:
    """Records written to ``topic`` (no transactions here: offsets are records)."""
    return sum(p.high_watermark for p in cluster.describe_topic(topic).partitions)


def local(cluster: Cluster) -> dict:
    """The guides' broker address, replaced by the cluster's."""
    return {"localhost:9092": cluster.bootstrap_servers}


def test_producer_guide(cluster, run_doc):
    out = run_doc("docs/producer.md", local(cluster))
    # What each example says it sends, counted on the broker: the quickstart's 100, the
    # careless callback's 5, the warm-up and the logged one (the 5000-byte message is
    # refused, the purged one never sent).
    assert messages_in(cluster, "docs-quickstart") == 100 + 5 + 1 + 1
    assert messages_in(cluster, "docs-backpressure") == 20_000
    assert messages_in(cluster, "docs-batch") == 50_000
    assert messages_in(cluster, "docs-batch-dicts") == 2
    assert messages_in(cluster, "docs-idempotent") == 10
    assert messages_in(cluster, "docs-stats") == 1000
    assert messages_in(cluster, "docs-keys") == 3
    assert "1 broker(s); 1 partition(s)" in out.stdout
    # The three refused configurations, each named in its error.
    for name in ("no.such.property", "linger.ms", "acks"):
        assert f'"{name}"' in out.stdout
    # Nothing went wrong on the way: no warning or error logged (the logging example
    # configures logging at WARNING), nor the warning of a close with a metadata request
    # in flight (test_metadata_refresh.py).
    logged = [line for line in out.stderr.splitlines()
              if line.startswith(("WARNING:", "ERROR:", "CRITICAL:"))]
    assert not logged and "client is closing" not in out.stderr, out.stderr


def test_consumer_guide(cluster, run_doc):
    out = run_doc("docs/consumer.md", local(cluster))
    assert messages_in(cluster, "docs-consume") == 100
    lines = out.stdout.splitlines()
    assert "docs-consume 0 1 b'k1' b'value 1' [('n', b'1')] (1, " in out.stdout
    assert "(0, 100)" in lines                            # get_watermark_offsets, cached
    assert 'subscribe() requires "group.id" to be configured' in lines
    assert not [line for line in lines if line.startswith("event:")], out.stdout


def test_share_consumer_guide(cluster, run_doc):
    cluster.set_group_config("docs-share", {"share.auto.offset.reset": "earliest"})
    out = run_doc("docs/share-consumer.md", local(cluster))
    lines = out.stdout.splitlines()
    assert lines[0] == "10 b'job 0' True", out.stdout
    assert lines[1].startswith("not yet: ")
    assert lines[2] == "[(0, None)]"
    assert lines[3:] == ["True", "True", "['docs-share']"]   # delivered again: count + 1
    # every record done with: nothing acquired, released or available left
    (part,) = cluster.share_state("docs-share")
    assert (part["start_offset"], part["records"]) == (20, []), part


def test_delivery_guarantees_guide(cluster, run_doc):
    run_doc("docs/delivery-guarantees.md", local(cluster))
    assert messages_in(cluster, "docs-guarantees") == 2


def test_asyncio_guide(cluster, run_doc):
    out = run_doc("docs/asyncio.md", local(cluster), epilogue="""
        assert len({(m.partition(), m.offset()) for m in delivered}) == 1000
    """)
    assert out.stdout.splitlines() == ["1000 delivered; 500 read back"]
    assert messages_in(cluster, "events") == 1000


def test_codec_guide(run_doc):
    out = run_doc("docs/codec.md")
    lines = out.stdout.splitlines()
    assert lines[0] == "BrokerError(code=6, name='NOT_LEADER_OR_FOLLOWER', retriable=True)"
    assert "100 1700000000000 b'k1' b'v1' [('trace', b'x')]" in lines
    assert "101 1700000000005 b'k2' None []" in lines


#: testing.md's sketches leave out the clients with ``...``: these do what the comments
#: there say, so that the rest of each block runs as written.
TESTING_PRELUDE = """
    import time
    from kafka_client import Consumer, Producer, TopicPartition

    def read_partition_0(cluster, topic, **conf):
        with Producer({"bootstrap.servers": cluster.bootstrap_servers}) as producer:
            producer.produce(topic, b"x" * 100, partition=0)
        cluster.wait_in_sync(topic)
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, **conf})
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 20
        while consumer.poll(0.2) is None:
            assert time.monotonic() < deadline, "nothing read"
        return consumer

    def read_near(cluster):
        read_partition_0(cluster, "near", **{"client.rack": "b", "client.id": "near"}).close()

    def fetch_in_sessions(cluster):
        global session_consumer
        cluster.create_topic("orders", assignments=[[1, 2, 3]])  # led by 1, as the doc asks
        session_consumer = read_partition_0(cluster, "orders", **{"fetch.wait.max.ms": 50})
        cluster.wait_for(lambda: cluster.fetch_sessions(1), what="a fetch session")

    def fetch_on(cluster):
        # its next Fetch finds the session gone, then it starts a new one (the doc's
        # block cleared the request log before the eviction)
        deadline = time.monotonic() + 10
        while not [e for e in cluster.request_log(api="Fetch")
                   if e.details.get("fetch_session", {}).get("kind") == "full"]:
            session_consumer.poll(0.1)
            assert time.monotonic() < deadline, "no new session"
"""


def test_testing_guide(run_doc):
    run_doc("docs/testing.md", {
        "...  # a consumer with client.rack=b, client.id=near reads partition 0":
            "read_near(cluster)",
        "...  # a consumer fetching in sessions": "fetch_in_sessions(cluster)",
        "...  # the consumer fetches on": "fetch_on(cluster)",
    }, prelude=TESTING_PRELUDE, epilogue="""
        assert retried, "the injected NOT_LEADER_OR_FOLLOWER is in the request log"
    """)

