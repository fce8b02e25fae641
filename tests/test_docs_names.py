"""The guides name only things that exist: every configuration property in backticks is
one the client knows (or refuses on purpose), or the test cluster's, or is listed below
with what else it is; every ``kafka_client``/``kafka_proto`` dotted name resolves (or is a
logger the package uses); every ``obj.method()`` of a client, a message, an error or the
test cluster is a method of that class."""
from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import kafka_client
from kafka_client import (AdminClient, Consumer, DeserializingConsumer, KafkaError, Message,
                          Producer, SerializingProducer, ShareConsumer, TopicPartition,
                          config)
from kafka_client.admin import OffsetSpec
from kafka_client.aio import AIOConsumer, AIOProducer
from kafka_client.producer import idempotence
from kafka_client.producer.producer import DeliveredMessage
from kafka_client.serialization import (DeserializerBuilder, SerializerBuilder,
                                        StringDeserializer, StringSerializer)
from kafka_client.testing import Cluster
from kafka_client.testing._config import BROKER_CONFIGS, TOPIC_CONFIGS
from kafka_client.testing._share_groups import SHARE_GROUP_CONFIGS
from kafka_proto import _crc, compression, hashing, logdir, messages, records
from kafka_proto.errors import ErrorCode
from kafka_proto.messages import ApiKey, ApiVersionsRequest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
# The sources only: not the .pyc files of a checkout whose imports wrote __pycache__.
PACKAGE_SOURCE = "\n".join(p.read_text(encoding="utf-8")
                           for p in (ROOT / "kafka_client").rglob("*.py*")
                           if p.suffix in (".py", ".pyx", ".pyi"))

#: dotted lowercase words: what a property name looks like
PROPERTY_LIKE = re.compile(r"[a-z][a-z0-9]*(?:\.[a-z][a-z0-9_]*)+")
#: file names and the like, which look the same
NOT_A_PROPERTY = re.compile(r".*\.(py|pyx|pxd|h|md|log|index|timeindex|toml|json|sh|txt)")

#: Backticked property-like names that are something else, with what they are.
OTHER_NAMES = {
    "key.serializer": "a serializing producer's own property (serializing_producer.py)",
    "value.serializer": "a serializing producer's own property (serializing_producer.py)",
    "key.deserializer": "a deserializing consumer's own property",
    "value.deserializer": "a deserializing consumer's own property",
    "key.serializer.builder": "a serializing producer's own property",
    "value.serializer.builder": "a serializing producer's own property",
    "key.deserializer.builder": "a deserializing consumer's own property",
    "value.deserializer.builder": "a deserializing consumer's own property",
    "broker.rack": "Kafka's broker property, which the test cluster takes as racks=",
    "node.id": "the attribute of the per-broker KIP-714 metrics",
    "kafka.fetch.wait.max.msec": "spark.md's example of a misspelt option it refuses",
    "kafka.sasl.jaas.config": "spark.md's example of a Java-only property it refuses",
    "sock.recv_into": "a socket's method, as the codec's callers use it",
    "socket.sendmsg": "a socket's method, which the client writes requests with",
    "cluster.log_path": "kafka_client.testing.Cluster's attribute",
    "atheris.instrument_imports": "atheris's API (fuzzing.md; atheris is the fuzz extra)",
    "share.record.lock.duration.ms": "a share group's group config (KIP-932), the broker's",
    "share.delivery.count.limit": "a share group's group config (KIP-932), the broker's",
}
#: ``kafka_client``/``kafka_proto`` names that stand for a kind of name
PLACEHOLDER_MODULES = {"kafka_proto._x", "kafka_proto.records._x"}


def backticked(doc: Path):
    """(line number, text) of every `...` span of the doc."""
    text = doc.read_text(encoding="utf-8")
    for m in re.finditer(r"`([^`\n]+)`", text):
        yield text.count("\n", 0, m.start()) + 1, m.group(1)


def resolves(dotted: str) -> bool:
    """``dotted`` is an importable module, or an attribute path under one."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def test_every_property_named_exists(librdkafka_metric_names):
    client = set(config.PROPERTIES) | {a for p in config.PROPERTIES.values()
                                       for a in p.aliases} | set(config.UNSUPPORTED)
    cluster = set(TOPIC_CONFIGS) | set(BROKER_CONFIGS) | set(SHARE_GROUP_CONFIGS)
    metrics = {m.split(".", 4)[4] for names in librdkafka_metric_names.values()
               for m in names}
    unknown = []
    for doc in DOCS:
        for line, text in backticked(doc):
            if not PROPERTY_LIKE.fullmatch(text) or NOT_A_PROPERTY.fullmatch(text):
                continue
            if (text in client or text in cluster or text in OTHER_NAMES
                    or text in metrics or f"{text}.avg" in metrics
                    or text.startswith("kafka.") and text[len("kafka."):] in client
                    or text.startswith(("kafka_client.", "kafka_proto."))   # the next test
                    or resolves(text) or resolves(f"kafka_proto.{text}")):
                continue
            unknown.append(f"{doc.relative_to(ROOT)}:{line}: {text}")
    assert not unknown, "\n".join(unknown)


class _Builder(SerializerBuilder, DeserializerBuilder):
    """Builds ``serde`` and leaves the configuration as it is."""

    def __init__(self, serde):
        self.serde = serde

    def build(self, conf, is_key):
        return self.serde, conf


def test_the_other_names_are_what_they_are_said_to_be():
    """The serializing clients take the serde properties (a dead address: nothing is
    sent); the test cluster has a log path; spark.md's examples of refused names are."""
    producer = SerializingProducer({
        "bootstrap.servers": "127.0.0.1:1", "key.serializer": StringSerializer(),
        "value.serializer.builder": _Builder(StringSerializer())})
    producer.close()
    consumer = DeserializingConsumer({
        "bootstrap.servers": "127.0.0.1:1", "key.deserializer": StringDeserializer(),
        "value.deserializer.builder": _Builder(StringDeserializer())})
    consumer.close()
    assert hasattr(Cluster, "log_path") or "self.log_path" in PACKAGE_SOURCE
    for refused in ("fetch.wait.max.msec", "sasl.jaas.config"):
        with pytest.raises(Exception):
            config.describe(refused)
    from kafka_client.testing._share_groups import SHARE_GROUP_CONFIGS
    assert {"share.record.lock.duration.ms", "share.delivery.count.limit"} <= \
        set(SHARE_GROUP_CONFIGS)


def test_every_package_name_resolves():
    unknown = []
    for doc in DOCS:
        for line, text in backticked(doc):
            for dotted in re.findall(r"\b((?:kafka_client|kafka_proto)(?:\.\w+)+)", text):
                # a logger name ("kafka_client.cluster") is in the source as a string
                if (dotted in PLACEHOLDER_MODULES or resolves(dotted)
                        or f'"{dotted}"' in PACKAGE_SOURCE):
                    continue
                unknown.append(f"{doc.relative_to(ROOT)}:{line}: {dotted}")
    assert not unknown, "\n".join(unknown)


#: what ``name.method()`` in the guides means, by object name
OBJECTS = {
    "producer": (Producer,), "Producer": (Producer,), "p": (Producer,),
    "consumer": (Consumer,), "Consumer": (Consumer,),
    "admin": (AdminClient,), "AdminClient": (AdminClient,),
    "msg": (Message, DeliveredMessage), "message": (Message, DeliveredMessage),
    "Message": (Message, DeliveredMessage),
    "err": (KafkaError,), "KafkaError": (KafkaError,),
    "cluster": (Cluster,), "Cluster": (Cluster,),
    "ShareConsumer": (ShareConsumer,),
}
#: share-consumer.md's consumer is a share consumer
SHARE_OBJECTS = {**OBJECTS, "consumer": (ShareConsumer,), "c": (ShareConsumer,)}
#: asyncio.md's producer and consumer are the asyncio ones
AIO_OBJECTS = {**OBJECTS, "producer": (AIOProducer,), "consumer": (AIOConsumer,)}


def test_every_method_named_exists():
    unknown = []
    for doc in DOCS:
        objects = {"asyncio.md": AIO_OBJECTS, "share-consumer.md": SHARE_OBJECTS}.get(
            doc.name, OBJECTS)
        for line, text in backticked(doc):
            for obj, method in re.findall(r"(?<![\w.])(\w+)\.(\w+)\(", text):
                classes = objects.get(obj)
                if classes and not any(hasattr(c, method) for c in classes):
                    unknown.append(f"{doc.relative_to(ROOT)}:{line}: {obj}.{method}()")
    assert not unknown, "\n".join(unknown)


def test_the_imports_shown_for_moving_over_work():
    """The ``# after`` lines of the guides' import swaps (``from confluent_kafka import
    Producer  # before`` / ``from kafka_client import Producer  # after``)."""
    swaps = [line.split("#")[0].strip() for doc in DOCS
             for line in doc.read_text(encoding="utf-8").splitlines()
             if line.startswith(("from kafka_client", "import kafka_client"))
             and line.rstrip().endswith("# after")]
    assert len(swaps) >= 3
    for line in swaps:
        exec(line, {})


#: the programs the guides' command lines run, as the argument list that runs each
PROGRAMS = {
    "kafka_client.testing": ["-m", "kafka_client.testing"],
    "kafka_client.tools": ["-m", "kafka_client.tools", "dump-log"],
    "tools/fuzz_run.py": ["tools/fuzz_run.py"],
    "tools/fuzz_capture.py": ["tools/fuzz_capture.py"],
    "./dev demo spark": ["-m", "kafka_client.spark.demo"],
    "benchmarks/bench_cluster_fetch.py": ["benchmarks/bench_cluster_fetch.py"],
    "./dev bench": ["benchmarks/run.py"],
    "benchmarks/run.py": ["benchmarks/run.py"],
}
#: options named in a guide's prose belong to one of the programs the guide is about
PROSE_PROGRAMS = {
    "testing.md": ("kafka_client.testing", "kafka_client.tools",
                   "benchmarks/bench_cluster_fetch.py"),
    "spark.md": ("./dev demo spark",),
    "index.md": ("./dev bench",),
}


def program_help(program: str) -> str:
    out = subprocess.run([sys.executable] + PROGRAMS[program] + ["--help"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    return out.stdout


def offers(help_text: str, option: str) -> bool:
    return re.search(re.escape(option) + r"(?![\w-])", help_text) is not None


def test_every_command_line_option_exists():
    """The options of the guides' command lines (``python -m kafka_client.testing
    --brokers 3 ...``, ``tools/fuzz_run.py records --seconds 600``) and those their prose
    names for the program they are about are in that program's ``--help``; fuzz_run's
    harness names are in its ``--list``."""
    helps = {program: program_help(program) for program in PROGRAMS}
    harnesses = subprocess.run([sys.executable, "tools/fuzz_run.py", "--list"], cwd=ROOT,
                               capture_output=True, text=True, timeout=60).stdout.split()
    unknown, used = [], set()
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8").replace("\\\n", " ")
        lines = [m.group(1) for m in re.finditer(r"(?m)^ {4}(\S.*)$", text)]
        lines += [t for _, t in backticked(doc)]
        for line in lines:
            program = next((p for p in PROGRAMS if p in line), None)
            if program is None:
                continue
            used.add(program)
            for option in re.findall(r"(?<!\S)(--[a-z][a-z-]*)", line.split("#")[0]):
                if not offers(helps[program], option):
                    unknown.append(f"{doc.name}: {line!r}: {option}")
            harness = re.search(r"fuzz_run\.py ([a-z]\w*)", line)
            if harness and harness.group(1) not in harnesses:
                unknown.append(f"{doc.name}: {line!r}: no harness {harness.group(1)}")
        for _, span in backticked(doc) if doc.name in PROSE_PROGRAMS else ():
            for option in re.findall(r"^(--[a-z][a-z-]*)", span):
                if not any(offers(helps[p], option) for p in PROSE_PROGRAMS[doc.name]):
                    unknown.append(f"{doc.name}: `{span}`: {option}")
    assert used >= set(PROGRAMS) - {"benchmarks/bench_cluster_fetch.py"}
    assert not unknown, "\n".join(unknown)


#: a file path the guides name (``tests/integration/test_x.py``, ``producer/_core.pyx``,
#: ``../benchmarks/README.md``), with the test it names after ``::`` if any
FILE_PATH = re.compile(r"(?<![\w./-])((?:\.\./)?[\w.-]+(?:/[\w.-]+)+"
                       r"\.(?:pyx|pxd|py|h|md|toml))(?!\w)(?:::([\w\[\]-]+))?"
                       r"|(?<![\w./-])(test_\w+\.py)::([\w\[\]-]+)")


def test_every_file_and_test_named_exists():
    """Paths are taken from the repository root, the docs folder, tests/ (the guides say
    ``integration/test_consumer.py::test_...``) or the packages; a test named after ``::``
    (also across a line break) is defined in that file."""
    unknown, tests_named = [], 0
    for doc in DOCS + [ROOT / "benchmarks" / "README.md"]:
        text = re.sub(r"::\s*\n\s*", "::", doc.read_text(encoding="utf-8"))
        for m in FILE_PATH.finditer(text):
            path, test = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
            where = f"{doc.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}"
            found = next((base / path for base in (doc.parent, ROOT, ROOT / "tests",
                                                   ROOT / "kafka_client", ROOT / "kafka_proto")
                          if (base / path).exists()), None)
            if found is None and "/" not in path:      # a test file named alone
                found = next((ROOT / "tests").rglob(path), None)
            if found is None and path.startswith("../shared/") \
                    and not (ROOT.parent / "shared").is_dir():
                continue      # the design and schemas beside the checkout, when there
            if found is None:
                unknown.append(f"{where}: {path}")
            elif test:
                tests_named += 1
                name = test.split("[")[0]
                if not re.search(rf"def {re.escape(name)}\b", found.read_text(encoding="utf-8")):
                    unknown.append(f"{where}: {path}::{test}")
    assert tests_named > 10
    assert not unknown, "\n".join(unknown)


#: Calls the client guides name alone that are not the clients' methods, with what they are.
OTHER_CALLS = {
    "len": "a builtin", "bool": "a builtin",
    "callback": "consumer.md: the rebalance callbacks' signature",
    "verify_cb": "ssl.certificate.verify_cb's signature",
    "crc32": "CRC-32 (kafka_proto._crc), the consistent partitioners' hash",
    "rd_kafka_message_status": "librdkafka's function",
    "set_ssl_cert": "librdkafka's function",
    "result": "concurrent.futures.Future.result, of the admin client's futures",
    "register": "kafka_client.spark.register",
    "aclose": "the close of confluent-kafka's asyncio Schema Registry serdes",
}
API_CLASSES = (Producer, Consumer, AdminClient, Message, DeliveredMessage, KafkaError,
               AIOProducer, AIOConsumer, TopicPartition, OffsetSpec, SerializerBuilder,
               DeserializerBuilder)


def test_every_call_named_in_the_client_guides_exists():
    """In the guides of the clients, a call named alone (`poll()`, `consume_arrow()`,
    `memberid()`) is a method of a client, a message, an error or an offset spec, a
    callback property (`stats_cb(json_str)`), a partitioner's hash (`murmur2(key)`), or
    listed above."""
    unknown = []
    for name in ("producer", "consumer", "admin", "asyncio", "transactions",
                 "delivery-guarantees", "security", "spark"):
        doc = ROOT / "docs" / f"{name}.md"
        for line, text in backticked(doc):
            for call in re.findall(r"(?<![\w.])([a-z_]\w*)\(", text):
                if not (any(hasattr(c, call) for c in API_CLASSES) or call in OTHER_CALLS
                        or call in config.PROPERTIES or hasattr(hashing, call)):
                    unknown.append(f"{doc.relative_to(ROOT)}:{line}: {call}()")
    assert not unknown, "\n".join(unknown)


def heading_anchors(doc: Path) -> set:
    """The anchors GitHub gives the headings of ``doc`` (lower case, punctuation but
    ``-`` and ``_`` dropped, spaces as ``-``, ``-1``, ``-2`` ... for repeats)."""
    text = re.sub(r"(?ms)^```.*?^```", "", doc.read_text(encoding="utf-8"))
    anchors, seen = set(), {}
    for heading in re.findall(r"(?m)^#{1,6} (.+?)\s*$", text):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return anchors


def test_every_link_and_anchor_resolves():
    unknown, anchored = [], 0
    for doc in DOCS + [ROOT / "benchmarks" / "README.md"]:
        text = doc.read_text(encoding="utf-8")
        for m in re.finditer(r"\]\(([^)\s]+)\)", text):
            target = m.group(1)
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = target.partition("#")
            linked = doc.parent / path if path else doc
            where = f"{doc.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}"
            if not linked.exists():
                unknown.append(f"{where}: {target}")
            elif anchor and linked.suffix == ".md":
                anchored += 1
                if anchor not in heading_anchors(linked):
                    unknown.append(f"{where}: {target}")
    assert anchored > 20
    assert not unknown, "\n".join(unknown)


#: Upper-case names of other projects the guides mention, with whose they are.
OUTSIDE_CONSTANTS = {
    "DATA_SOURCE_NOT_FOUND": "Spark's error class", "SSL_CTX": "OpenSSL's type",
    "METH_FASTCALL": "CPython's calling convention", "RTLD_GLOBAL": "dlopen's flag",
    "LD_PRELOAD": "the dynamic linker's variable", "PYSPARK_PYTHON": "PySpark's variable",
    "KRB5_CONFIG": "Kerberos's variable", "KRB5_KTNAME": "Kerberos's variable",
}


def test_every_constant_named_exists():
    """Every upper-case name in backticks (an error code such as `_INVALID_ARG` or
    `NOT_LEADER_OR_FOLLOWER`, a constant such as `OFFSET_BEGINNING` or `LOG_SUFFIX`) is
    one of the client's or the codec's (error codes, API keys, module constants, enum
    members, message class attributes); else, as an environment variable or a label, it is
    in the project's own source; else it is another project's, listed above."""
    known = set(dir(KafkaError)) | set(ErrorCode.__members__) | set(ApiKey.__members__)
    for namespace in (kafka_client, idempotence, _crc, compression, logdir, records,
                      messages, ApiVersionsRequest, records.Compression,
                      records.TimestampType, records.ControlRecordType,
                      compression.CompressionCodec):
        known |= set(dir(namespace))
    own_source = "\n".join(
        p.read_text(encoding="utf-8", errors="replace")
        for folder in ("kafka_client", "kafka_proto", "tools", "tests", "benchmarks")
        for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".pyx", ".pxd", ".h"))
    unknown = []
    for doc in DOCS:
        for line, text in backticked(doc):
            for name in re.findall(r"(?<![\w.])(_?[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+|_[A-Z]+)"
                                   r"(?![\w(])", text):
                if (name in known or name in OUTSIDE_CONSTANTS
                        or re.search(rf"\b{name}\b", own_source)):
                    continue
                unknown.append(f"{doc.relative_to(ROOT)}:{line}: {name}")
    assert not unknown, "\n".join(unknown)
