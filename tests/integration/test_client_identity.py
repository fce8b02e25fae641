"""``cluster_id()`` and ``set_sasl_credentials()`` on every client (Producer, Consumer,
AdminClient), as confluent-kafka has them: the id the brokers report (the same one
confluent-kafka reads), a clear error in time without a broker; credentials replaced at
run time take effect at the next authentication (wrong ones: _AUTHENTICATION, right
ones: the client works again)."""
from __future__ import annotations

import time

import pytest

from kafka_client import AdminClient, Consumer, KafkaError, KafkaException, Producer

pytestmark = pytest.mark.integration

CLIENTS = [Producer, Consumer, AdminClient]
USER, PASSWORD = "alice", "alice-secret"


def make(cls, conf):
    if cls is Consumer:
        conf = dict(conf, **{"group.id": "identity"})
    return cls(conf)


@pytest.mark.parametrize("cls", CLIENTS, ids=lambda c: c.__name__)
def test_cluster_id_is_the_one_the_brokers_report(cls, tansu_broker):
    ck = pytest.importorskip("confluent_kafka")
    theirs = ck.Producer({"bootstrap.servers": tansu_broker.bootstrap})
    expected = theirs.list_topics(timeout=10).cluster_id
    assert expected  # Tansu has one
    client = make(cls, {"bootstrap.servers": tansu_broker.bootstrap})
    try:
        assert client.cluster_id(10) == expected
        assert client.cluster_id() == expected          # cached now: no request
        assert client.list_topics(timeout=10).cluster_id == expected
    finally:
        client.close()
    with pytest.raises(RuntimeError):
        client.cluster_id()


@pytest.mark.parametrize("cls", CLIENTS, ids=lambda c: c.__name__)
def test_cluster_id_without_a_broker_fails_within_its_timeout(cls):
    client = make(cls, {"bootstrap.servers": "127.0.0.1:1"})
    try:
        start = time.monotonic()
        with pytest.raises(KafkaException) as exc:
            client.cluster_id(0.5)
        assert 0.4 < time.monotonic() - start < 3
        # _TIMED_OUT as confluent-kafka's, whatever kept the brokers away (a program may
        # test it); _TRANSPORT is list_topics()'s code there
        assert exc.value.args[0].code() == KafkaError._TIMED_OUT, exc.value
        with pytest.raises(TypeError):
            client.cluster_id("1")
    finally:
        client.close()


def sasl(bootstrap, password, errors):
    return {"bootstrap.servers": bootstrap, "security.protocol": "sasl_plaintext",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": USER,
            "sasl.password": password, "error_cb": errors.append,
            "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 200}


def wait_for_auth_error(client, errors, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(e.code() == KafkaError._AUTHENTICATION for e in errors):
            return
        client.poll(0.1)
    pytest.fail(f"no _AUTHENTICATION error; got {[e.str() for e in errors]}")


@pytest.mark.parametrize("cls", CLIENTS, ids=lambda c: c.__name__)
def test_set_sasl_credentials_wrong_then_right(cls, sasl_cluster):
    errors = []
    client = make(cls, sasl(sasl_cluster.bootstrap_servers, "wrong", errors))
    try:
        with pytest.raises(KafkaException):
            client.list_topics(timeout=2)
        wait_for_auth_error(client, errors)
        client.set_sasl_credentials(USER, PASSWORD)
        # the next reconnect authenticates with the new password
        assert client.cluster_id(10) == sasl_cluster.cluster_id
        assert client.list_topics(timeout=10).cluster_id == sasl_cluster.cluster_id
        with pytest.raises(TypeError):
            client.set_sasl_credentials(USER, None)
        with pytest.raises(TypeError):
            client.set_sasl_credentials(1, PASSWORD)
    finally:
        client.close()


@pytest.mark.parametrize("cls", CLIENTS, ids=lambda c: c.__name__)
def test_set_sasl_credentials_right_then_wrong_on_reconnect(cls, sasl_cluster):
    errors = []
    client = make(cls, sasl(sasl_cluster.bootstrap_servers, PASSWORD, errors))
    try:
        client.list_topics(timeout=10)
        before = len(sasl_cluster.sasl_authentications())
        client.set_sasl_credentials(USER, "no-longer-valid")
        client.list_topics(timeout=10)  # the connection already up keeps its session
        assert not [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
        sasl_cluster.cut_connections()
        with pytest.raises(KafkaException):
            client.list_topics(timeout=2)
        wait_for_auth_error(client, errors)
        assert len(sasl_cluster.sasl_authentications()) == before  # none succeeded
    finally:
        client.close()
