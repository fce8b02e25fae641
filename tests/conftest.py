"""Shared fixtures: real brokers on free loopback ports.

* ``tansu_broker`` / ``noida_broker``: one broker per test session;
* ``broker``: parametrized over both (a test using it runs once per broker);
* ``fresh_noida_broker``: a private noida-db for one test, for restarts and faults;
* ``topic_name``: a unique topic name per test;
* ``tls_endpoints``: Tansu behind stunnel (server-only and mutual TLS) plus stunnels
  with a wrong-name and an unknown-CA certificate (kafka_client._testing.tls); skips
  when stunnel (Debian stunnel4) is not installed, which ``./dev`` installs;
* ``sasl_cluster``: a one-broker ``kafka_client.testing.Cluster`` requiring SASL (user
  ``alice`` / ``alice-secret``; PLAIN, SCRAM-SHA-256/512, OAUTHBEARER with unsecured JWTs).
* ``run_child``: runs Python code in a child process with a hard timeout, for cases that
  could hang (a regression then fails instead of stalling the suite).
* ``run_doc``: runs the python blocks of a guide in order in such a child process (the
  tests of docs/, tests/integration/test_docs_examples.py) and checks what their comments
  say a ``print`` shows; ``doc_python_blocks`` gives the blocks themselves,
  ``doc_print_claims`` / ``check_print_claims`` those comments (tests/test_docs_blocks.py).

Every broker object has ``.bootstrap`` ("127.0.0.1:PORT"), ``.host``, ``.port``,
``.kind`` and ``.create_topic(name, partitions=1)``; noida-db also ``.restart()``,
``.stop()``, ``.start()`` (data kept in ``.data_dir``) and ``.kill()``.

A test that uses any of them is marked ``integration`` automatically; ``-m "not
integration"`` runs the codec tests alone. ``KAFKA_TEST_BROKERS=tansu`` (comma list)
limits the ``broker`` parametrization. A missing broker binary skips, with the reason.
"""
from __future__ import annotations

import collections
import io
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
import tokenize
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings

# Hypothesis fails an example slower than its deadline (200 ms) as flaky; on a loaded
# 2-core machine one is that slow now and then for want of a CPU (test_assignors: 391 ms,
# then 0.9 ms when run again). The tests check properties, not speed: no deadline.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")

# Run from a checkout without `pip install -e .`: the in-place built package is at the root.
_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from kafka_client._testing.brokers import BrokerNotAvailable, NoidaBroker, make_broker

BROKER_FIXTURES = {"tansu_broker", "noida_broker", "broker", "fresh_noida_broker",
                   "tls_endpoints", "sasl_cluster"}
ALL_KINDS = ("tansu", "noida")


def _selected_kinds():
    raw = os.environ.get("KAFKA_TEST_BROKERS")
    if not raw:
        return ALL_KINDS
    kinds = tuple(k.strip() for k in raw.split(",") if k.strip())
    unknown = set(kinds) - set(ALL_KINDS)
    if unknown:
        raise pytest.UsageError(f"KAFKA_TEST_BROKERS: unknown broker(s) {sorted(unknown)}")
    return kinds


#: The test files that take longest (their tests' seconds summed, full runs of 2026-11-30
#: on a loaded 2-core machine), run first. `./dev test` hands whole files to its three
#: workers in collection order (``--no-loadscope-reorder``); xdist's own order (most tests
#: first) started these few-test files last, and the run waited for them alone (a
#: 24-minute run whose tests summed 21 minutes per worker). The two Spark files do not
#: start together: three JVMs starting at once on two cores made Spark's Python worker
#: miss its fixed 10 s to connect back ("Python worker failed to connect back").
LONGEST_FIRST = (
    "tests/integration/spark/test_spark_stream.py",     # 400-510 s
    "tests/testing/test_soak.py",                       # 400-460 s (a Spark case)
    "tests/integration/test_consumer_group.py",         # 140 s
    "tests/testing/test_cluster_clients.py",            # 110-170 s
    "tests/integration/spark/test_spark_batch.py",      # 360-370 s
    "tests/integration/test_share_consumer_faults.py",  # 120 s
    "tests/integration/test_retry_backoff.py",          # 85-120 s
    "tests/integration/test_sasl.py",                   # 65-85 s
    "tests/testing/test_cluster_interop.py",            # 65 s
    "tests/fuzz/test_fuzz_smoke.py",                    # 50-65 s
    "tests/integration/test_authorization.py",          # 45-60 s
)


def _run_order(items):
    """``items`` in file order: LONGEST_FIRST, then the other files by number of tests
    (most first, xdist's own order); the tests of a file in their order."""
    path_of = {id(item): item.nodeid.split("::", 1)[0] for item in items}
    counts = collections.Counter(path_of.values())
    first = {path: rank for rank, path in enumerate(LONGEST_FIRST)}

    def key(indexed):
        index, item = indexed
        path = path_of[id(item)]
        if path in first:
            return (0, first[path], "", index)
        return (1, -counts[path], path, index)

    return [item for _, item in sorted(enumerate(items), key=key)]


def pytest_collection_modifyitems(config, items):
    for item in items:
        if BROKER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)
    items[:] = _run_order(items)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """pytest-xdist: each worker is told how the tests are distributed (its own ``dist``
    option reads "no"): integration/test_authorization.py starts all the cases of its
    selected tests at once only where one process runs the whole module."""
    node.workerinput["dist"] = node.config.getoption("dist")


def _start(kind, **kwargs):
    try:
        b = make_broker(kind, **kwargs)
    except BrokerNotAvailable as exc:
        pytest.skip(f"{kind} broker not available: {exc}")
    b.start()
    return b


@pytest.fixture(scope="session")
def tansu_broker():
    b = _start("tansu")
    try:
        yield b
    finally:
        b.stop()
        b.cleanup()


@pytest.fixture(scope="session")
def noida_broker():
    b = _start("noida")
    try:
        yield b
    finally:
        b.stop()
        b.cleanup()


@pytest.fixture(params=ALL_KINDS)
def broker(request):
    """The session broker of each kind in turn."""
    if request.param not in _selected_kinds():
        pytest.skip(f"{request.param} not in KAFKA_TEST_BROKERS")
    return request.getfixturevalue(f"{request.param}_broker")


@pytest.fixture
def fresh_noida_broker(tmp_path):
    """A noida-db of this test's own, free to be stopped, restarted or killed."""
    b = _start("noida", data_dir=str(tmp_path / "noida-data"), log_dir=str(tmp_path))
    assert isinstance(b, NoidaBroker)
    try:
        yield b
    finally:
        b.stop()


_topic_counter = itertools.count()


@pytest.fixture
def topic_name(request):
    """A topic name unique in this session (brokers are shared across tests)."""
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name)[:80].strip("-")
    return f"{base}-{next(_topic_counter)}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def kafka_cluster(tmp_path):
    """A 3-broker ``kafka_client.testing.Cluster`` of this test's own (logs under
    tmp_path): leader moves, broker stops, injected errors, the request log."""
    from kafka_client.testing import Cluster

    with Cluster(brokers=3, data_dir=str(tmp_path / "cluster")) as cluster:
        yield cluster


@pytest.fixture
def proxied_cluster(tmp_path):
    """``(cluster, proxy)``: a 1-broker ``kafka_client.testing.Cluster`` (KIP-848 group
    heartbeats every 200 ms, sessions of 3 s) that advertises a ``FaultProxy`` with
    ``follow_frames=True`` in front of it, so every client connection goes through the
    proxy and ``proxy.rewrite_responses`` can change any answer."""
    from kafka_client._testing.proxy import FaultProxy
    from kafka_client.testing import Cluster

    # Both on ports bound at once (0): ports picked first were taken by another process
    # before the cluster bound them now and then (EADDRINUSE).
    with FaultProxy("127.0.0.1", 9, follow_frames=True) as proxy:
        with Cluster(brokers=1, data_dir=str(tmp_path / "cluster"),
                     advertised_ports=[proxy.port],
                     broker_config={"group.consumer.heartbeat.interval.ms": 200,
                                    "group.consumer.session.timeout.ms": 3000}) as cluster:
            proxy.retarget("127.0.0.1", cluster.brokers[0].port)
            yield cluster, proxy


@pytest.fixture
def metadata_failure():
    """``run(conf)``: a Producer on ``conf`` whose list_topics() must fail within 2 s;
    returns that error's text and the texts error_cb got."""
    from kafka_client import KafkaException, Producer

    def run(conf):
        errors = []
        p = Producer(conf, error_cb=errors.append)
        try:
            with pytest.raises(KafkaException) as ei:
                p.list_topics(timeout=2)
            p.poll(0.1)
        finally:
            p.close()
        return ei.value.args[0].str(), [e.str() for e in errors]
    return run


@pytest.fixture
def raising_callback_failure():
    """``run(conf, exc_type, match)``: a Producer on ``conf``, where an application callback
    raises ``exc_type``: its list_topics() must fail, the exception (matching ``match``)
    must reach a poll() within 5 s, and close() must return in under 5 s (a later
    attempt's exception, which close() raises once closed, is let through). Returns the
    KafkaErrors error_cb got."""
    from kafka_client import KafkaException, Producer

    def run(conf, exc_type, match):
        errors = []
        p = Producer(conf, error_cb=errors.append)
        try:
            with pytest.raises(KafkaException):
                p.list_topics(timeout=0.5)   # the attempt fails at once: no need to wait
            with pytest.raises(exc_type, match=match):
                for _ in range(50):
                    p.poll(0.1)
        finally:
            started = time.monotonic()
            try:
                p.close()
            except exc_type:
                pass
            assert time.monotonic() - started < 5
        return errors
    return run


@pytest.fixture(scope="session")
def tls_endpoints():
    from kafka_client._testing.brokers import tansu_binary
    from kafka_client._testing.tls import TlsEndpoints, stunnel_binary

    if stunnel_binary() is None:
        pytest.skip("stunnel is not installed (Debian package stunnel4; ./dev installs it "
                    "when apt-get is usable)")
    if tansu_binary() is None:
        pytest.skip("tansu broker not available")
    endpoints = TlsEndpoints()
    try:
        yield endpoints
    finally:
        endpoints.stop()


#: What sasl_cluster enables, as Kafka's ``sasl.enabled.mechanisms``.
SASL_MECHANISMS = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER"


@pytest.fixture(scope="session")
def sasl_cluster(tmp_path_factory):
    """A one-broker test cluster that requires SASL; its request log shows every
    authentication (``sasl_authentications()``)."""
    from kafka_client.testing import Cluster

    with Cluster(brokers=1, data_dir=str(tmp_path_factory.mktemp("sasl-cluster")),
                 broker_config={"sasl.enabled.mechanisms": SASL_MECHANISMS},
                 users={"alice": "alice-secret"}) as cluster:
        yield cluster


#: How the suite starts Spark's driver JVM (``PYSPARK_SUBMIT_ARGS``, for the ``spark``
#: fixture and for child processes running Spark, such as tools/soak.py's spark mode):
#: with the C1 compiler alone. The driver otherwise spends its start and the tests'
#: short queries compiling with C2 for a speed they never last long enough to use: the
#: JVM of tests/integration/spark took 77 + 122 CPU-s with both compilers, 42 + 68 with
#: C1 alone, on the 2-core machine.
SPARK_SUBMIT_ARGS = "--driver-java-options -XX:TieredStopAtLevel=1 pyspark-shell"


@pytest.fixture(scope="module")
def spark():
    """A local Spark session (``local[2]``) with the ``kafka_native`` data source
    registered, shared by the tests of one module (Spark takes seconds to start). Skips
    without PySpark or Java. Spark's Python workers run this interpreter, with the
    checkout importable."""
    pytest.importorskip("pyspark")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs Java 17+ (no java on PATH, no JAVA_HOME)")
    from pyspark.sql import SparkSession

    from kafka_client.spark import register

    saved = {k: os.environ.get(k) for k in ("PYSPARK_PYTHON", "PYTHONPATH",
                                              "PYSPARK_SUBMIT_ARGS")}
    os.environ["PYSPARK_SUBMIT_ARGS"] = SPARK_SUBMIT_ARGS
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (_ROOT, saved["PYTHONPATH"]) if p)
    session = (SparkSession.builder.master("local[2]")
               .appName("kafka-native-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.sql.session.timeZone", "UTC")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    try:
        yield session
    finally:
        session.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def run_child():
    """``run_child(code, timeout=60, **env)`` runs ``code`` (dedented) with this
    interpreter in a child process whose working directory is the repository root and
    returns the ``subprocess.CompletedProcess`` (text ``stdout``/``stderr``). A child
    still running after ``timeout`` seconds is killed and the test fails."""
    def run(code: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess:
        try:
            return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=_ROOT,
                                  env={**os.environ, **env}, capture_output=True, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"child process still running after {timeout}s (hung?); stderr:\n"
                        f"{exc.stderr}")
    return run


#: ```python blocks of a Markdown file: the code, and where it starts (0-based line)
_PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def doc_python_blocks(doc: str) -> list:
    """The ```python blocks of ``doc`` (a path from the repository root, such as
    ``docs/producer.md``), as ``(first line index, code)`` pairs in order."""
    text = (Path(_ROOT) / doc).read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start(1)), m.group(1)) for m in _PYTHON_BLOCK.finditer(text)]


#: In a print's output as a guide writes it, text that stands for anything: ``...`` and
#: ``<a description>``.
_ANY_TEXT = re.compile(r"\.\.\.|<[^<>]*>")
#: Tokens after which a name starts a statement.
_STATEMENT_START = {tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT,
                    tokenize.ENCODING}


@dataclass(frozen=True)
class PrintClaim:
    """What a guide's comment says a ``print(...)`` shows."""
    line: int                  #: of the comment, 1-based, in the code given
    text: str                  #: the comment's text
    pattern: re.Pattern        #: what a whole output line must match


def doc_print_claims(code: str) -> list:
    """The :class:`PrintClaim` of each ``print(...)`` statement of a guide's ``code`` that
    has one, in order: the comment at the end of the line the call ends on, or else a
    comment line right after the call. In the comment, ``...`` and ``<a description>``
    stand for any text."""
    tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    lines = code.split("\n")
    claims = []
    for i, token in enumerate(tokens[:-1]):
        starts_statement = i == 0 or tokens[i - 1].type in _STATEMENT_START
        if not (starts_statement and token.string == "print" and tokens[i + 1].string == "("):
            continue
        depth, end = 0, i + 1
        for end in range(i + 1, len(tokens)):
            depth += {"(": 1, ")": -1}.get(tokens[end].string, 0)
            if depth == 0:
                break
        last_line = tokens[end].end[0]
        after = tokens[end + 1]
        if after.type == tokenize.COMMENT and after.start[0] == last_line:
            comment, line = after.string, last_line
        elif last_line < len(lines) and lines[last_line].lstrip().startswith("#"):
            comment, line = lines[last_line], last_line + 1
        else:
            continue
        text = comment.strip().lstrip("#").strip()
        pattern = ".*".join(re.escape(piece) for piece in _ANY_TEXT.split(text))
        claims.append(PrintClaim(line, text, re.compile(pattern)))
    return claims


def check_print_claims(doc: str, code: str, stdout: str) -> None:
    """Fails unless each output ``code`` claims (:func:`doc_print_claims`) is a line of
    ``stdout``, in the order the claims are written."""
    printed = [line.rstrip() for line in stdout.splitlines()]
    position = 0
    for claim in doc_print_claims(code):
        found = next((n for n in range(position, len(printed))
                      if claim.pattern.fullmatch(printed[n])), None)
        if found is None:
            pytest.fail(f"{doc}:{claim.line}: the comment says the print shows "
                        f"{claim.text!r}; printed (after the claims before it):\n"
                        + "\n".join(printed[position:]), pytrace=False)
        position = found + 1


@pytest.fixture(scope="session", name="doc_python_blocks")
def doc_python_blocks_fixture():
    """:func:`doc_python_blocks`, for tests that run a guide's blocks in their own process
    (the Spark guide, on the module's Spark session)."""
    return doc_python_blocks


@pytest.fixture(scope="session", name="doc_print_claims")
def doc_print_claims_fixture():
    """:func:`doc_print_claims`, for the tests of the convention itself."""
    return doc_print_claims


@pytest.fixture(scope="session", name="check_print_claims")
def check_print_claims_fixture():
    """:func:`check_print_claims`, for the tests of the convention itself."""
    return check_print_claims


#: What Python prints for an exception that does not change the exit status (another
#: thread's, an ``__del__``'s, one at exit).
_UNCLEAN_EXIT = ("Traceback (most recent call last)", "Exception ignored in")


@pytest.fixture
def run_doc(run_child, tmp_path):
    """``run_doc(doc, replace=None, prelude="", epilogue="", timeout=120)`` runs every
    ```python block of ``doc`` (``docs/producer.md``, ...) in order in one child
    interpreter, as the guides say their examples run, and returns the
    ``CompletedProcess``; a non-zero exit fails the test with the child's output. Each
    block keeps its line in the file, so a traceback names the doc's own line.
    ``replace`` maps text of the blocks to what the test runs instead (the bootstrap
    address, a ``...`` placeholder); each must occur and keep the line count.
    ``prelude`` and ``epilogue`` are the test's own code, run before and after the doc's
    in the same namespace (helpers for placeholders; checks of what the examples did).
    The child must exit with status 0 and no exception printed (another thread's, an
    ``__del__``'s); what the blocks' comments say a ``print`` shows must be in the
    output, in order (:func:`doc_print_claims`)."""
    def run(doc: str, replace: dict = None, prelude: str = "", epilogue: str = "",
            timeout: float = 120) -> subprocess.CompletedProcess:
        blocks = doc_python_blocks(doc)
        assert blocks, f"{doc} has no python blocks"
        lines = []
        for first, code in blocks:
            lines += [""] * (first - len(lines)) + code.split("\n")[:-1]
        source = "\n".join(lines) + "\n"
        for old, new in (replace or {}).items():
            assert old in source, f"{doc}: {old!r} is not in its python blocks any more"
            assert old.count("\n") == new.count("\n"), f"{new!r} changes the line count"
            source = source.replace(old, new)
        parts = tmp_path / f"{Path(doc).stem}-parts.json"
        parts.write_text(json.dumps({"prelude": textwrap.dedent(prelude), "doc": source,
                                     "epilogue": textwrap.dedent(epilogue)}))
        out = run_child(f"""
            import json
            parts = json.load(open({str(parts)!r}))
            namespace = {{"__name__": "__main__"}}
            exec(compile(parts["prelude"], "<test prelude>", "exec"), namespace)
            exec(compile(parts["doc"], {doc!r}, "exec"), namespace)
            exec(compile(parts["epilogue"], "<test epilogue>", "exec"), namespace)
        """, timeout=timeout)
        # An exception in another thread, or in a finalizer at exit, is printed and the
        # exit status stays 0: the guides' examples have none.
        unclean = [m for m in _UNCLEAN_EXIT if m in out.stderr]
        if out.returncode != 0 or unclean:
            pytest.fail(f"{doc}: exit status {out.returncode}, {unclean or 'stderr'}:\n"
                        f"{out.stdout}\n{out.stderr}", pytrace=False)
        check_print_claims(doc, source, out.stdout)
        return out
    return run


@pytest.fixture
def produce_for():
    """``produce_for(producer, topic, seconds, pause=0.05, prefix=b"")`` produces
    ``prefix + b"0"``, ``prefix + b"1"``, ... for ``seconds``, polling ``pause`` seconds
    after each (a slow, steady stream across a broker's session lifetimes or a token's),
    flushes, and returns how many it sent."""
    def produce(producer, topic: str, seconds: float, pause: float = 0.05,
                prefix: bytes = b"") -> int:
        sent, deadline = 0, time.monotonic() + seconds
        while time.monotonic() < deadline:
            producer.produce(topic, prefix + b"%d" % sent)
            sent += 1
            producer.poll(pause)
        assert producer.flush(30) == 0
        return sent
    return produce


@pytest.fixture(scope="session")
def librdkafka_metric_names():
    """The KIP-714 metric names librdkafka 2.16 (confluent-kafka) pushes, by client type
    (seen on kafka_client.testing, subscribed to every metric), which ours push too."""
    producer = ("connection.creation.rate", "connection.creation.total",
                "node.request.latency.avg", "node.request.latency.max",
                "produce.throttle.time.avg", "produce.throttle.time.max",
                "record.queue.time.avg", "record.queue.time.max",
                "request.latency.avg", "request.latency.max")
    consumer = ("connection.creation.rate", "connection.creation.total",
                "coordinator.assigned.partitions",
                "coordinator.commit.latency.avg", "coordinator.commit.latency.max",
                "coordinator.rebalance.latency.avg", "coordinator.rebalance.latency.max",
                "coordinator.rebalance.latency.total",
                "fetch.manager.fetch.latency.avg", "fetch.manager.fetch.latency.max",
                "node.request.latency.avg", "node.request.latency.max",
                "poll.idle.ratio.avg")
    return {"producer": {"org.apache.kafka.producer." + n for n in producer},
            "consumer": {"org.apache.kafka.consumer." + n for n in consumer}}
