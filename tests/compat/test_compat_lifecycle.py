"""confluent-kafka drop-in: the clients' lifecycle (close(), use after close, the context
managers, truthiness, subclasses that skip super().__init__) and KafkaError's default
flags, side by side with confluent-kafka."""
from __future__ import annotations

import time

import pytest

from kafka_client import Consumer, KafkaError, Producer

ck = pytest.importorskip("confluent_kafka")

NOWHERE = "127.0.0.1:1"

PRODUCER_CALLS = [("produce", ("t",)), ("poll", (0,)), ("flush", (0,)), ("purge", ()),
                  ("list_topics", (None, 1)), ("cluster_id", (1,)),
                  ("set_sasl_credentials", ("u", "p")),
                  # a producer without transactional.id: closed comes first
                  ("init_transactions", (1,)), ("begin_transaction", ()),
                  ("commit_transaction", (1,)), ("abort_transaction", (1,))]
#: served from the handle every client type shares in confluent-kafka: closed, they say so
HANDLE_CALLS = {"list_topics", "cluster_id", "set_sasl_credentials"}
CONSUMER_CALLS = [("poll", (0,)), ("consume", (1, 0)), ("assign", "tps"),
                  ("unassign", ()), ("assignment", ()), ("subscribe", (["t"],)),
                  ("unsubscribe", ()), ("commit", ()), ("store_offsets", "msg"),
                  ("committed", "tps"), ("position", "tps"), ("pause", "tps"),
                  ("resume", "tps"), ("seek", "tp"), ("get_watermark_offsets", "tp"),
                  ("offsets_for_times", "tps"), ("memberid", ()),
                  ("consumer_group_metadata", ()), ("incremental_assign", "tps"),
                  ("incremental_unassign", "tps"), ("list_topics", (None, 1)),
                  ("cluster_id", (1,)), ("set_sasl_credentials", ("u", "p"))]


def args_for(module, spec):
    if not isinstance(spec, str):
        return spec
    tp = module.TopicPartition("t", 0, 1)
    return {"tps": ([tp],), "tp": (tp,), "msg": (module.Message("t", 0, 1),)}[spec]


def test_producer_after_close_like_confluent():
    ours = Producer({"bootstrap.servers": NOWHERE})
    theirs = ck.Producer({"bootstrap.servers": NOWHERE, "log_level": 0})
    assert bool(ours) is True and bool(theirs) is True     # an empty queue is not false
    assert ours.close() is True and theirs.close() is True
    assert ours.close() is True and theirs.close() is True  # again
    for name, args in PRODUCER_CALLS:
        with pytest.raises(RuntimeError) as a:
            getattr(ours, name)(*args)
        with pytest.raises(RuntimeError) as b:
            getattr(theirs, name)(*args)
        expect = "Handle has been closed" if name in HANDLE_CALLS else "Producer has been closed"
        assert str(a.value) == str(b.value) == expect, name
    assert len(ours) == len(theirs) == 0 and bool(ours) is True


def test_purge_after_close_raises_at_once():
    p = Producer({"bootstrap.servers": NOWHERE})
    p.produce("t", b"x")
    p.close(0)
    t = time.monotonic()
    with pytest.raises(RuntimeError, match="closed"):
        p.purge()
    assert time.monotonic() - t < 0.5


def test_consumer_after_close_like_confluent():
    ours = Consumer({"bootstrap.servers": NOWHERE, "group.id": "g"})
    theirs = ck.Consumer({"bootstrap.servers": NOWHERE, "group.id": "g", "log_level": 0})
    ours.close()
    theirs.close()
    assert ours.close() is None and theirs.close() is None
    for name, spec in CONSUMER_CALLS:
        with pytest.raises(RuntimeError) as a:
            getattr(ours, name)(*args_for(__import__("kafka_client"), spec))
        with pytest.raises(RuntimeError) as b:
            getattr(theirs, name)(*args_for(ck, spec))
        expect = "Handle has been closed" if name in HANDLE_CALLS else "Consumer closed"
        assert str(a.value) == str(b.value) == expect, name


def test_admin_handle_calls_after_exit_like_confluent():
    """Leaving an AdminClient's with-block: list_topics(), cluster_id(),
    set_sasl_credentials() and list_groups() raise RuntimeError("Handle has been closed")
    as confluent-kafka's (they said "AdminClient has been closed", which its other
    methods say, here as there)."""
    import warnings
    from confluent_kafka.admin import AdminClient as TheirAdmin

    from kafka_client.admin import AdminClient
    for cls in (AdminClient, TheirAdmin):
        with cls({"bootstrap.servers": NOWHERE, "log_level": 0}) as admin:
            pass
        for name, args in (("list_topics", (None, 1)), ("cluster_id", (1,)),
                           ("set_sasl_credentials", ("u", "p")), ("list_groups", ())):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # list_groups()
                with pytest.raises(RuntimeError) as raised:
                    getattr(admin, name)(*args)
            assert str(raised.value) == "Handle has been closed", (cls, name)
        with pytest.raises(RuntimeError) as raised:
            admin.list_consumer_groups()
        assert str(raised.value) == "AdminClient has been closed", cls


def test_with_blocks_close_like_confluent():
    for module in (__import__("kafka_client"), ck):
        with module.Producer({"bootstrap.servers": NOWHERE, "log_level": 0}) as p:
            assert p.flush(0) == 0
        with pytest.raises(RuntimeError):
            p.poll(0)
        with module.Consumer({"bootstrap.servers": NOWHERE, "group.id": "g",
                              "log_level": 0}) as c:
            c.assign([module.TopicPartition("t", 0)])
        with pytest.raises(RuntimeError):
            c.assignment()


@pytest.mark.parametrize("kind", ["Producer", "Consumer"])
def test_subclass_without_super_init_gets_runtime_error_like_confluent(kind):
    for base in (getattr(__import__("kafka_client"), kind), getattr(ck, kind)):
        class Forgetful(base):
            def __init__(self, conf):
                self.conf = conf

        obj = Forgetful({})
        with pytest.raises(RuntimeError):
            obj.poll(0)
        if kind == "Producer":
            with pytest.raises(RuntimeError):
                obj.produce("t", b"x")
            assert len(obj) == 0
        obj.close()


def test_kafka_error_defaults_like_confluent():
    for code in (KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN,
                 KafkaError.NOT_LEADER_OR_FOLLOWER, KafkaError.REQUEST_TIMED_OUT,
                 KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError._MSG_TIMED_OUT):
        for args in ((code,), (code, "reason")):
            ours, theirs = KafkaError(*args), ck.KafkaError(*args)
            assert (ours.fatal(), ours.retriable(), ours.txn_requires_abort()) == \
                (theirs.fatal(), theirs.retriable(), theirs.txn_requires_abort()) == \
                (False, False, False)
    flags = dict(fatal=True, retriable=True, txn_requires_abort=True)
    ours, theirs = KafkaError(1, "r", **flags), ck.KafkaError(1, "r", **flags)
    assert (ours.fatal(), ours.retriable(), ours.txn_requires_abort()) == \
        (theirs.fatal(), theirs.retriable(), theirs.txn_requires_abort()) == (True, True, True)

