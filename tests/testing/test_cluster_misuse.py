"""The test cluster's public API and command line used wrongly: each mistake fails at
once with an error that names it, before or without a cluster process left behind, and
a filter that could only match nothing is refused rather than answered with nothing."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from kafka_client.testing import Cluster
from kafka_client.testing.cluster import ClusterError

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with Cluster(brokers=1, data_dir=str(tmp_path_factory.mktemp("misuse"))) as c:
        yield c


@pytest.mark.parametrize("kwargs, words", [
    ({"brokers": "3"}, "brokers must be a whole number"),        # was a bare TypeError
    ({"brokers": 2.5}, "brokers must be a whole number"),        # failed in the process
    ({"brokers": 0}, "at least 1"),
    ({"brokers": 1, "ports": [0, 0]}, "ports: 2 given for 1 brokers"),   # was ignored
    ({"brokers": 1, "advertised_ports": [70000]}, "is not a port"),
    ({"brokers": 1, "log_level": "NOPE"}, "not a logging level"),  # a traceback, then
])                                                                  # "did not start"
def test_bad_arguments_are_refused_before_a_process_starts(kwargs, words):
    started = time.monotonic()
    with pytest.raises(ValueError, match=words):
        Cluster(**kwargs)
    assert time.monotonic() - started < 0.5


def test_a_misspelt_api_or_kind_is_refused_not_matched_by_nothing(cluster):
    cluster.create_topic("misspelt")
    with pytest.raises(ClusterError, match="unknown API 'Prodcue'"):
        cluster.request_log(api="Prodcue")      # answered [] before: an empty proof
    with pytest.raises(ValueError, match="kind: 'requests'"):
        cluster.request_log(kind="requests")
    assert cluster.request_log(api="PRODUCE") == cluster.request_log(api="Produce")
    with pytest.raises(ClusterError, match="unknown API"):
        cluster.set_latency(1, apis=["Fetchh"])


def test_inject_errors_takes_one_error_name(cluster):
    cluster.clear_faults()
    # It went through the name letter by letter ("unknown error code 'N'").
    cluster.inject_errors("Produce", "NOT_LEADER_OR_FOLLOWER")
    assert [p["codes"] for p in cluster.pending_errors()] == [[6]]
    cluster.clear_faults()


def test_a_partition_out_of_range_is_a_cluster_error(cluster):
    cluster.create_topic("two-partitions", partitions=2)
    assert cluster.partition("two-partitions", 1).partition == 1
    with pytest.raises(ClusterError, match="no partition two-partitions-2") as got:
        cluster.partition("two-partitions", 2)                 # an IndexError before
    assert got.value.code == "UNKNOWN_TOPIC_OR_PARTITION"


def test_a_cluster_starts_again_after_stop():
    c = Cluster(brokers=1)
    first_dir = c.data_dir
    c.stop()
    assert not os.path.exists(first_dir)
    try:
        c.start()           # its temporary directory was gone: the process failed
        assert c.running
        assert c.create_topic("again").name == "again"
    finally:
        c.stop()
    assert not c.running and not os.path.exists(first_dir)


def test_calls_after_the_cluster_process_died_say_so():
    c = Cluster(brokers=1)
    try:
        os.kill(c.pid, signal.SIGKILL)
        c._process.wait(10)
        with pytest.raises(ClusterError, match="does not answer|process ended"):
            c.create_topic("dead")            # a bare BrokenPipeError before
        with pytest.raises(ClusterError, match="not running"):
            c.topics()
    finally:
        c.stop()
    assert not c.running


def test_a_call_meeting_a_channel_closed_by_another_threads_stop_says_so():
    """stop() closes the control channel outside the call lock, forgetting the reader
    before the socket: a call already past its "not running" check then met a reader of
    None (a bare AttributeError before, which the call's own error handling let through)."""
    c = Cluster(brokers=1)
    try:
        c._reader.close()
        c._reader = None                  # the moment between the two in _close_channel()
        with pytest.raises(ClusterError, match="not running"):
            c.topics()
        assert c._sock is None            # the call closed what was left of the channel
    finally:
        c.stop()
    assert not c.running


def test_a_call_whose_channel_another_threads_stop_closes_meanwhile_says_so(monkeypatch):
    """stop() in another thread closes the channel while a call waits for its answer:
    the call raises ClusterError (it met a socket of None: a bare AttributeError)."""
    c = Cluster(brokers=1)
    try:
        read_reply = c._read_reply

        def answered_then_closed():
            reply = read_reply()
            c._close_channel()            # what the other thread's stop() does meanwhile
            return reply

        monkeypatch.setattr(c, "_read_reply", answered_then_closed)
        with pytest.raises(ClusterError, match="does not answer"):
            c.topics()
        assert c._sock is None
    finally:
        c.stop()
    assert not c.running


@pytest.mark.parametrize("args, words", [
    (["--brokers", "0"], "at least one broker"),
    (["--ports", "a"], "'a' is not a port"),                   # a traceback before
    (["--ports", "0,0"], "ports: 2 given for 1 brokers"),      # ran, ignoring one
    (["--advertised-ports", "1,2"], "2 given for 1 brokers"),
    (["--control-port", "-5"], "'-5' is not a port"),          # a traceback before
    (["--log-level", "chatty"], "not a logging level"),        # a traceback before
    (["--topic", "t:0"], "number of partitions must be positive"),
    (["--broker-config", "no.such=1"], "no.such"),
])
def test_the_command_line_refuses_bad_arguments_cleanly(tmp_path, args, words):
    """Each bad argument: an exit status, one line naming it, no traceback, and no
    temporary data directory left behind (every failed start left one)."""
    env = dict(os.environ, TMPDIR=str(tmp_path),
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-m", "kafka_client.testing", "--brokers", "1",
                          *args], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode != 0
    assert words in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert os.listdir(tmp_path) == []


def test_attach_names_a_bad_or_dead_control_address():
    with pytest.raises(ValueError, match="expected HOST:PORT"):
        Cluster.attach("nonsense")                  # "invalid literal for int()" before
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    with pytest.raises(ClusterError, match="no cluster control channel at"):
        Cluster.attach(f"127.0.0.1:{port}", timeout=2)   # a bare ConnectionRefusedError
