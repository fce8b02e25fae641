"""TLS against stunnel (a TLS terminator no one here wrote) in front of Tansu, with
certificates made by the test: server-only and mutual TLS carry 100,000 messages each
way; a wrong host name, an unknown CA and a missing client certificate are refused with
_SSL errors, promptly; turning verification off is accepted; PEM strings, encrypted keys
and PKCS#12 keystores load. Tansu advertises the stunnel port, so every connection after
bootstrap is TLS too."""
from __future__ import annotations

import ssl
import time
from pathlib import Path

import pytest

from kafka_client import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kafka_client._testing.tls import KEY_PASSWORD

pytestmark = pytest.mark.integration

N = 100_000


def produce_all(conf, topic, n=N):
    errors = []
    delivered = [0]

    def on_delivery(err, msg):
        if err is None:
            delivered[0] += 1
        else:
            errors.append(err)

    p = Producer(conf, on_delivery=on_delivery, linger_ms=5)
    try:
        for i in range(n):
            while True:
                try:
                    p.produce(topic, b"v%d" % i, key=b"k%d" % (i % 100))
                    break
                except BufferError:
                    p.poll(0.01)
        assert p.flush(60) == 0
    finally:
        p.close()
    assert not errors, errors[:3]
    assert delivered[0] == n


def consume_all(conf, topic, n=N, partitions=1):
    c = Consumer(dict(conf, **{"group.id": f"g-{topic}", "enable.auto.commit": False}))
    seen = {}
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + 60
        count = 0
        while count < n and time.monotonic() < deadline:
            for m in c.consume(10000, 0.5):
                assert m.error() is None, m.error()
                seen[(m.partition(), m.offset())] = m.value()
                count += 1
    finally:
        c.close()
    return seen


def check_round_trip(conf, topic):
    produce_all(conf, topic)
    seen = consume_all(conf, topic)
    assert len(seen) == N
    assert sorted(seen) == [(0, i) for i in range(N)]  # every offset once, none missing
    assert {seen[(0, i)] for i in (0, N // 2, N - 1)} == {b"v0", b"v%d" % (N // 2),
                                                          b"v%d" % (N - 1)}


def test_server_only_tls_round_trip(tls_endpoints, topic_name):
    tls_endpoints.server_only_broker.create_topic(topic_name)
    check_round_trip(tls_endpoints.conf(tls_endpoints.server_only), topic_name)


def test_mutual_tls_round_trip(tls_endpoints, topic_name):
    c = tls_endpoints.certs
    tls_endpoints.mutual_broker.create_topic(topic_name)
    conf = tls_endpoints.conf(tls_endpoints.mutual, **{
        "ssl.certificate.location": str(c.client_cert),
        "ssl.key.location": str(c.client_key_encrypted), "ssl.key.password": KEY_PASSWORD})
    check_round_trip(conf, topic_name)


def expect_refused(conf, needle, timeout=10.0):
    """A producer on ``conf`` cannot get metadata; error_cb reports an _SSL error whose
    text contains ``needle``, within ``timeout``: no hang, no silent retry loop."""
    errors = []
    p = Producer(conf, error_cb=errors.append, socket_connection_setup_timeout_ms=5000)
    started = time.monotonic()
    try:
        with pytest.raises(KafkaException) as refused:
            p.list_topics(timeout=10)
        # The refusal itself, when it comes, not the call's timeout.
        assert refused.value.args[0].code() == KafkaError._SSL, refused.value
        assert time.monotonic() - started < 5, "list_topics() waited for its timeout"
        while not errors and time.monotonic() - started < timeout:
            p.poll(0.1)
    finally:
        p.close()
    ssl_errors = [e for e in errors if e.code() == KafkaError._SSL]
    assert ssl_errors, errors
    assert needle in ssl_errors[0].str(), ssl_errors[0].str()
    return ssl_errors[0].str()


def test_hostname_mismatch_refused(tls_endpoints):
    text = expect_refused(tls_endpoints.conf(tls_endpoints.wrong_name), "certificate")
    assert "127.0.0.1" in text  # names the broker it was talking to


def expect_accepted(conf):
    """Metadata comes back through the endpoint (the bootstrap connection is TLS)."""
    p = Producer(conf)
    try:
        assert p.list_topics(timeout=10).brokers
    finally:
        p.close()


def test_hostname_check_off_accepts_wrong_name(tls_endpoints):
    expect_accepted(tls_endpoints.conf(tls_endpoints.wrong_name,
                                       **{"ssl.endpoint.identification.algorithm": "none"}))


def test_unknown_ca_refused(tls_endpoints):
    expect_refused(tls_endpoints.conf(tls_endpoints.unknown_ca), "certificate verify failed")


def test_system_store_does_not_trust_the_test_ca(tls_endpoints):
    conf = tls_endpoints.conf(tls_endpoints.server_only)
    del conf["ssl.ca.location"]  # the system CA store, librdkafka's default
    expect_refused(conf, "certificate verify failed")


def test_verification_off_accepts_unknown_ca(tls_endpoints):
    expect_accepted(tls_endpoints.conf(tls_endpoints.unknown_ca,
                                       **{"enable.ssl.certificate.verification": False}))


def test_mutual_tls_without_client_certificate_refused(tls_endpoints):
    errors = []
    p = Producer(tls_endpoints.conf(tls_endpoints.mutual), error_cb=errors.append)
    try:
        with pytest.raises(KafkaException):
            p.list_topics(timeout=3)
        p.poll(0.5)
    finally:
        p.close()
    # TLS 1.3: the server's refusal comes after the handshake, as an alert.
    ssl_errors = [e for e in errors if e.code() == KafkaError._SSL]
    assert ssl_errors, errors
    assert "CERTIFICATE_REQUIRED" in ssl_errors[0].str().upper(), ssl_errors[0].str()


@pytest.mark.parametrize("form", ["pem_strings", "pkcs12"])
def test_client_certificate_forms(tls_endpoints, topic_name, form):
    c = tls_endpoints.certs
    if form == "pem_strings":
        extra = {"ssl.ca.pem": c.ca.read_text(), "ssl.ca.location": None,
                 "ssl.certificate.pem": c.client_cert.read_text(),
                 "ssl.key.pem": c.client_key.read_text()}
    else:
        extra = {"ssl.keystore.location": str(c.client_p12),
                 "ssl.keystore.password": KEY_PASSWORD}
    conf = tls_endpoints.conf(tls_endpoints.mutual, **extra)
    tls_endpoints.mutual_broker.create_topic(topic_name)
    produce_all(conf, topic_name, n=1000)
    assert len(consume_all(conf, topic_name, n=1000)) == 1000


def test_wrong_key_password_fails_at_construction(tls_endpoints):
    c = tls_endpoints.certs
    conf = tls_endpoints.conf(tls_endpoints.mutual, **{
        "ssl.certificate.location": str(c.client_cert),
        "ssl.key.location": str(c.client_key_encrypted), "ssl.key.password": "wrong"})
    with pytest.raises(KafkaException) as info:
        Producer(conf)
    assert info.value.args[0].code() == KafkaError._INVALID_ARG
    assert "ssl.certificate.location" in info.value.args[0].str()


def test_a_tls_listener_spoken_to_in_plaintext_is_named_as_the_likely_cause(
        tls_endpoints, metadata_failure):
    """stunnel closes the connection on our plaintext ApiVersions request: the error says
    the listener may be TLS (librdkafka hints the same)."""
    text, errors = metadata_failure(
        {"bootstrap.servers": tls_endpoints.server_only.bootstrap})
    hint = "while asked for its API versions (is it a TLS listener? check security.protocol)"
    assert hint in text, text
    assert errors and hint in errors[0], errors


# -- librdkafka's TLS callback and the settings made through OpenSSL directly ----------------

def test_certificates_as_set_ssl_cert_sets_them(tls_endpoints, topic_name):
    """ssl_ca / ssl_certificate / ssl_key (librdkafka's set_ssl_cert() names) take PEM or
    DER bytes: a DER CA and client certificate, a PEM key as bytes."""
    c = tls_endpoints.certs
    conf = tls_endpoints.conf(tls_endpoints.mutual, **{
        "ssl.ca.location": None,
        "ssl_ca": ssl.PEM_cert_to_DER_cert(c.ca.read_text()),
        "ssl_certificate": ssl.PEM_cert_to_DER_cert(c.client_cert.read_text()),
        "ssl_key": c.client_key.read_bytes()})
    tls_endpoints.mutual_broker.create_topic(topic_name)
    produce_all(conf, topic_name, n=100)
    assert len(consume_all(conf, topic_name, n=100)) == 100


def test_verify_cb_sees_the_broker_certificate_and_can_refuse_it(tls_endpoints):
    seen = []

    def accept(*args):
        seen.append(args)
        return True

    expect_accepted(tls_endpoints.conf(tls_endpoints.server_only,
                                       **{"ssl.certificate.verify_cb": accept}))
    name, broker_id, x509_error, depth, der = seen[0]
    assert name == f"{tls_endpoints.server_only.bootstrap}/bootstrap" and broker_id == -1
    assert (x509_error, depth) == (0, 0)
    assert der == ssl.PEM_cert_to_DER_cert(tls_endpoints.certs.server_cert.read_text())
    text = expect_refused(tls_endpoints.conf(
        tls_endpoints.server_only, **{"ssl.certificate.verify_cb": lambda *a: False}),
        "ssl.certificate.verify_cb refused the broker's certificate")
    assert tls_endpoints.server_only.bootstrap in text


def test_a_raising_verify_cb_fails_the_connection_and_reaches_poll(
        tls_endpoints, raising_callback_failure):
    def verify_cb(*args):
        raise LookupError("pin not found")

    errors = raising_callback_failure(
        tls_endpoints.conf(tls_endpoints.server_only, **{"ssl.certificate.verify_cb": verify_cb}),
        LookupError, "pin not found")
    assert any(e.code() == KafkaError._SSL and "verify_cb raised" in e.str() for e in errors)


def test_sigalgs_list_restricts_the_handshake(tls_endpoints):
    """The test certificates are RSA: RSA-PSS signatures connect; offering only ECDSA
    leaves the server nothing to sign with, and the handshake fails."""
    server = tls_endpoints.server_only
    expect_accepted(tls_endpoints.conf(server, **{"ssl.sigalgs.list": "rsa_pss_rsae_sha256"}))
    expect_refused(tls_endpoints.conf(server, **{"ssl.sigalgs.list": "ECDSA+SHA256"}),
                   "SSL handshake failed")
    with pytest.raises(KafkaException, match='"ssl.sigalgs.list": "NOPE"'):
        Producer(tls_endpoints.conf(server, **{"ssl.sigalgs.list": "NOPE"}))


def test_providers_load_and_a_made_up_one_is_refused(tls_endpoints):
    server = tls_endpoints.server_only
    expect_accepted(tls_endpoints.conf(server, **{"ssl.providers": "default,legacy"}))
    with pytest.raises(KafkaException, match='OpenSSL provider "made-up" cannot be loaded'):
        Producer(tls_endpoints.conf(server, **{"ssl.providers": "made-up"}))


ENGINES = Path("/usr/lib/x86_64-linux-gnu/engines-3")


def test_engine_location_loads_the_engine_or_names_the_path(tls_endpoints):
    server = tls_endpoints.server_only
    attic = ENGINES / "loader_attic.so"
    if not attic.exists():
        pytest.skip(f"no OpenSSL engine at {attic}")
    expect_accepted(tls_endpoints.conf(server, **{"ssl.engine.location": str(attic)}))
    missing = str(ENGINES / "no-such-engine.so")
    with pytest.raises(KafkaException, match=f"engine {missing} cannot be loaded"):
        Producer(tls_endpoints.conf(server, **{"ssl.engine.location": missing}))


@pytest.mark.parametrize("name, value", [("ssl.sigalgs.list", "rsa_pss_rsae_sha256"),
                                         ("ssl.providers", "default"),
                                         ("ssl.engine.location", "/x/engine.so")])
def test_openssl_settings_are_refused_where_openssl_cannot_be_reached(
        tls_endpoints, monkeypatch, name, value):
    """The plain path: with the CPython internals off (KAFKA_NATIVE_PLAIN), these cannot
    be made, and ignoring them would weaken the TLS asked for: refused, saying why."""
    monkeypatch.setenv("KAFKA_NATIVE_PLAIN", "1")
    with pytest.raises(KafkaException) as info:
        Producer(tls_endpoints.conf(tls_endpoints.server_only, **{name: value}))
    assert f'"{name}"' in info.value.args[0].str()
    assert "KAFKA_NATIVE_PLAIN" in info.value.args[0].str()


@pytest.fixture
def tls_cluster(tls_endpoints, tmp_path):
    """A 1-broker test cluster (which, as Kafka, never answers acks=0 Produce) behind
    stunnel with the TLS endpoints' certificates, advertising the stunnel port."""
    from kafka_client._testing.brokers import free_port
    from kafka_client._testing.tls import Stunnel
    from kafka_client.testing import Cluster

    certs = tls_endpoints.certs
    broker_port, tls_port = free_port(), free_port()
    with Cluster(brokers=1, data_dir=str(tmp_path / "cluster"), ports=[broker_port],
                 advertised_ports=[tls_port]) as cluster:
        with Stunnel("127.0.0.1", broker_port, certs.server_cert, certs.server_key,
                     port=tls_port) as tunnel:
            yield cluster, tunnel


def close_acks0_producer(conf, topic, count=200):
    """Produce ``count`` messages with acks=0, flush, and return how long close() took."""
    producer = Producer(dict(conf, acks=0, **{"linger.ms": 0}))
    for i in range(count):
        producer.produce(topic, b"%d" % i, partition=0)
    assert producer.flush(10) == 0
    started = time.monotonic()
    producer.close()
    return time.monotonic() - started


def test_an_acks0_producer_closes_at_once_over_tls_on_a_broker_that_never_answers(
        tls_endpoints, tls_cluster):
    """Kafka never answers an acks=0 Produce: over TLS, close() waited for those answers
    until its 2 s grace ran out (in plaintext it has closed at once since 1deffcb; 1 ms
    for confluent-kafka 2.16.1 here). It now ends its side of the TLS stream
    (close_notify) and closes when the broker's end comes, every message written."""
    cluster, tunnel = tls_cluster
    cluster.create_topic("acks0-tls", replication_factor=1)
    took = close_acks0_producer(tls_endpoints.conf(tunnel), "acks0-tls")
    assert took < 1.0, f"close() took {took:.2f} s"
    deadline = time.monotonic() + 5
    while cluster.partition("acks0-tls", 0).high_watermark < 200 \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cluster.partition("acks0-tls", 0).high_watermark == 200


def test_an_acks0_producer_closes_at_once_over_tls_on_a_broker_that_answers(
        tls_endpoints, topic_name):
    """Tansu answers acks=0 Produce: the close reads (and drops) those answers until the
    broker's end, and loses no message."""
    tls_endpoints.server_only_broker.create_topic(topic_name)
    conf = tls_endpoints.conf(tls_endpoints.server_only)
    took = close_acks0_producer(conf, topic_name)
    assert took < 1.0, f"close() took {took:.2f} s"
    consumer = Consumer(dict(conf, **{"group.id": topic_name}))
    consumer.assign([TopicPartition(topic_name, 0, 0)])
    values, deadline = [], time.monotonic() + 20
    try:
        while len(values) < 200 and time.monotonic() < deadline:
            values += [m.value() for m in consumer.consume(200, 0.5) if m.error() is None]
    finally:
        consumer.close()
    assert values == [b"%d" % i for i in range(200)]
