"""SASL GSSAPI end to end: a Kerberos realm (MIT krb5kdc on a loopback port), the test
cluster accepting GSSAPI with the broker's keytab, our producer and consumer getting
their ticket through sasl.kerberos.kinit.cmd and carrying messages; kcat (librdkafka with
Cyrus SASL, Debian) against the same cluster, its messages read back by our consumer;
the failures (no ticket, unknown service, KDC down) each a clear _AUTHENTICATION error
within seconds."""
from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from kafka_client import Consumer, KafkaError, Producer, TopicPartition
from kafka_client._net.security import gssapi
from kafka_client._testing.kerberos import Kdc, kdc_unavailable
from kafka_client.testing import Cluster
from tests.integration.test_sasl import auth_errors

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(kdc_unavailable() is not None or gssapi.available(),
                                 reason=kdc_unavailable() or gssapi.available() or "")]

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
#: Cyrus SASL's GSSAPI plugin, which Debian's librdkafka (kcat) uses for GSSAPI
CYRUS_GSSAPI = any(Path(d, "libgssapiv2.so").exists()
                   for d in ("/usr/lib/x86_64-linux-gnu/sasl2", "/usr/lib/aarch64-linux-gnu/sasl2",
                             "/usr/lib/sasl2"))


@pytest.fixture(scope="module")
def kerberos(tmp_path_factory):
    """The realm, and a one-broker cluster requiring GSSAPI, started with the broker's
    keytab in its environment. Yields (kdc, cluster, alice's keytab)."""
    with Kdc(str(tmp_path_factory.mktemp("kdc"))) as kdc:
        service = kdc.add_principal("kafka/127.0.0.1")
        alice = kdc.add_principal("alice")
        # the cluster process starts with this environment: the broker's keytab
        with kdc.activated(keytab=service, ccache="client-ccache"), \
                Cluster(brokers=1, broker_config={"sasl.enabled.mechanisms": "GSSAPI"}) as cl:
            yield kdc, cl, alice


def gssapi_conf(cluster, keytab, **extra):
    conf = {"bootstrap.servers": cluster.bootstrap_servers,
            "security.protocol": "sasl_plaintext", "sasl.mechanism": "GSSAPI",
            "sasl.kerberos.keytab": str(keytab), "sasl.kerberos.principal": "alice"}
    conf.update(extra)
    return conf


def read_back(conf, topic, n, timeout=30.0, group=False):
    """The first ``n`` values of partition 0; ``group``: as a member of a consumer group
    (the coordinator's connection authenticates too) instead of by assignment."""
    c = Consumer(dict(conf, **{"group.id": f"g-{topic}", "enable.auto.commit": False,
                               "auto.offset.reset": "earliest"}))
    got = []
    try:
        if group:
            c.subscribe([topic])
        else:
            c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + timeout
        while len(got) < n and time.monotonic() < deadline:
            got += [m.value() for m in c.consume(1000, 0.5) if m.error() is None]
    finally:
        c.close()
    return got


def test_produce_and_consume_over_kerberos(kerberos, topic_name):
    _kdc, cluster, alice = kerberos
    cluster.create_topic(topic_name)
    before = len(cluster.sasl_authentications())
    conf = gssapi_conf(cluster, alice)
    p = Producer(conf)
    for i in range(2000):
        p.produce(topic_name, b"k%d" % i)
    assert p.flush(30) == 0
    p.close()
    assert read_back(conf, topic_name, 2000, group=True) == [b"k%d" % i for i in range(2000)]
    done = [e.details for e in cluster.sasl_authentications()[before:]]
    assert done and all(d["mechanism"] == "GSSAPI" and d["principal"] == "User:alice"
                        for d in done)


def test_reauthentication_keeps_kerberos_sessions_going(kerberos, topic_name, produce_for):
    """KIP-368 with GSSAPI: a cluster giving 1.5 s sessions; a producer sending for 4 s
    authenticates again on its connections (a new Kerberos context each time)."""
    _kdc, _cluster, alice = kerberos
    with Cluster(brokers=1, broker_config={"sasl.enabled.mechanisms": "GSSAPI",
                                           "connections.max.reauth.ms": 1500}) as cluster:
        cluster.create_topic(topic_name)
        p = Producer(gssapi_conf(cluster, alice))
        sent = produce_for(p, topic_name, 4)
        p.close()
        again = [e for e in cluster.sasl_authentications() if e.details["reauthentication"]]
        assert again and all(e.details["mechanism"] == "GSSAPI" for e in again)
        assert read_back(gssapi_conf(cluster, alice), topic_name, sent) == [
            b"%d" % i for i in range(sent)]


def test_no_ticket_is_a_clear_error(kerberos, tmp_path, monkeypatch):
    """kinit fails (the keytab has no key for mallory): logged, and the connection's
    authentication fails naming Kerberos's reason."""
    _kdc, cluster, alice = kerberos
    monkeypatch.setenv("KRB5CCNAME", f"FILE:{tmp_path}/no-ticket")
    errors = auth_errors(gssapi_conf(cluster, alice, **{"sasl.kerberos.principal": "mallory"}))
    text = errors[0].str()
    assert "Kerberos authentication to kafka@127.0.0.1" in text
    assert "No Kerberos credentials available" in text


def test_an_unknown_service_is_a_clear_error(kerberos):
    _kdc, cluster, alice = kerberos
    errors = auth_errors(gssapi_conf(cluster, alice,
                                     **{"sasl.kerberos.service.name": "nosuchservice"}))
    text = errors[0].str()
    assert "nosuchservice/127.0.0.1@" in text and "not found in Kerberos database" in text


def test_a_hung_kdc_holds_up_nothing_else(kerberos, topic_name, tmp_path, monkeypatch):
    """The realm's KDC stops answering (a port that accepts and says nothing): Kerberos
    waits about 25 s before giving up, on the connection's helper thread; meanwhile
    the client's I/O thread goes on: the queued message times out on time."""
    kdc, cluster, alice = kerberos
    cluster.create_topic(topic_name)
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(16)
    monkeypatch.setenv("KRB5CCNAME", f"FILE:{tmp_path}/tgt-only")
    subprocess.run(["kinit", "-k", "-t", str(alice), "alice"], check=True,
                   capture_output=True)   # a ticket-granting ticket, no service ticket
    original = kdc.krb5_conf.read_text()
    kdc.krb5_conf.write_text(original.replace(f":{kdc.port}",
                                              f":{hole.getsockname()[1]}"))
    reports = []
    p = None
    try:
        p = Producer(gssapi_conf(cluster, alice, **{
            "sasl.kerberos.min.time.before.relogin": 0, "message.timeout.ms": 1000}))
        started = time.monotonic()
        p.produce(topic_name, b"x", on_delivery=lambda err, _msg: reports.append(err))
        while not reports and time.monotonic() - started < 10:
            p.poll(0.1)
        elapsed = time.monotonic() - started
    finally:
        kdc.krb5_conf.write_text(original)
        if p is not None:
            p.close()
        hole.close()
    assert reports and reports[0].code() == KafkaError._MSG_TIMED_OUT
    assert elapsed < 3, elapsed


def test_canonical_bootstrap_names_pick_the_kerberos_principal(kerberos, tmp_path,
                                                                 monkeypatch):
    """client.dns.lookup=resolve_canonical_bootstrap_servers_only (KIP-235): the
    bootstrap server given as an address is reached under its reverse name, so the
    client asks the KDC for kafka/<that name>; the brokers the metadata names are
    reached as advertised (kafka/127.0.0.1)."""
    kdc, cluster, alice = kerberos
    host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
    try:
        name = socket.getnameinfo((host, int(port)), socket.NI_NAMEREQD)[0]
    except OSError:
        pytest.skip(f"{host} has no name by reverse lookup here")
    # the broker's keytab gets the key of that name's principal too
    kdc.add_principal(f"kafka/{name}", keytab=kdc.keytab_path("kafka/127.0.0.1"))
    ccache = tmp_path / "canonical"
    monkeypatch.setenv("KRB5CCNAME", f"FILE:{ccache}")
    p = Producer(gssapi_conf(cluster, alice, **{
        "client.dns.lookup": "resolve_canonical_bootstrap_servers_only"}))
    try:
        assert p.list_topics(timeout=10).brokers
    finally:
        p.close()
    tickets = subprocess.run(["klist", "-c", str(ccache)], capture_output=True,
                             text=True).stdout
    assert f"kafka/{name}@" in tickets, tickets


@pytest.mark.skipif(KCAT is None or not CYRUS_GSSAPI,
                    reason="kcat (Debian kcat) with Cyrus SASL's GSSAPI plugin "
                           "(libsasl2-modules-gssapi-mit) is not installed")
def test_kcat_over_kerberos_read_back_by_our_consumer(kerberos, topic_name):
    """librdkafka's own GSSAPI (through Cyrus SASL) against the test cluster's acceptor;
    what it produced reads back through our GSSAPI consumer."""
    _kdc, cluster, alice = kerberos
    cluster.create_topic(topic_name)
    before = len(cluster.sasl_authentications())
    lines = "".join(f"kcat-{i}\n" for i in range(50))
    done = subprocess.run(
        [KCAT, "-P", "-b", cluster.bootstrap_servers, "-t", topic_name, "-p", "0",
         "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=GSSAPI",
         "-X", f"sasl.kerberos.keytab={alice}", "-X", "sasl.kerberos.principal=alice"],
        input=lines, text=True, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    got = read_back(gssapi_conf(cluster, alice), topic_name, 50)
    assert got == [f"kcat-{i}".encode() for i in range(50)]
    kinds = [e.details["principal"] for e in cluster.sasl_authentications()[before:]]
    assert kinds.count("User:alice") >= 2     # kcat's connection and ours
