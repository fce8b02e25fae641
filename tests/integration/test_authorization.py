"""Our clients refused by the broker's authorizer, side by side with confluent-kafka
(librdkafka 2.16.0), the reference: each case of ``authz_cases.py`` runs once with each
client, against the same refusal (an answer carrying TOPIC_, GROUP_, TRANSACTIONAL_ID_ or
CLUSTER_AUTHORIZATION_FAILED, as from a broker whose ACLs deny the operation), and the
ACL is then "granted" (the refusal lifted). Asserted for each client: the errors it
reports and how soon, every message accepted reported exactly once (counted in the
log), whether the client is usable again once granted, and that close() returns.

The cases run in child processes with a hard timeout, a few per client, each with its
own test cluster, all at once while the tests wait for their results (authz_runners.py).
"""
from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

from authz_runners import PEERS, Runs  # authz_runners.py beside

pytest.importorskip("confluent_kafka")

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

#: "at once": well under any timeout a case could have waited out
PROMPT_S = 3.0


def authz_case(name: str) -> Any:
    """Marks a test (or a parameter) as asserting on what case ``name`` of
    authz_cases.py observed with each client (the ``outcome`` fixture)."""
    return pytest.mark.authz_case(name)


def with_case(case: str, *more: Any) -> Any:
    """A parameter set ``(case, *more)`` marked as asserting on ``case``."""
    return pytest.param(case, *more, marks=authz_case(case))


def case_of(item: pytest.Item) -> Optional[str]:
    marker = item.get_closest_marker("authz_case")
    return marker.args[0] if marker else None


def runs_whole_modules(config: pytest.Config) -> bool:
    """Whether this process runs every selected test of this module: without xdist, or
    with a distribution that keeps a module's tests together (tests/conftest.py tells
    the workers which)."""
    worker = getattr(config, "workerinput", None)
    return worker is None or worker.get("dist") in ("loadfile", "loadscope")


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest) -> Iterator[Runs]:
    """The runners of this module's tests: the cases of all its selected tests started at
    once where this process runs them all, else each when its test asks for it."""
    cases: List[Optional[str]] = []
    if runs_whole_modules(request.config):
        cases = [case_of(item) for item in request.session.items
                 if item.path == request.node.path]
    runs = Runs(dict.fromkeys(case for case in cases if case))
    yield runs
    runs.close()


@pytest.fixture
def outcome(request: pytest.FixtureRequest, runs: Runs
            ) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """``(ours, librdkafka)``: what the test's case observed with each client."""
    case = case_of(request.node)
    results = []
    for peer, done in zip(PEERS, runs.result(case)):
        if done.failure is not None:
            pytest.fail(f"{case} with {peer} failed:\n{done.failure}")
        results.append(done.result)
    return results[0], results[1]


def values(log: Dict[str, int], prefix: str) -> Dict[str, int]:
    return {v: n for v, n in log.items() if v.startswith(prefix)}


def assert_written_once(log: Dict[str, int], prefix: str, count: int) -> None:
    assert values(log, prefix) == {f"{prefix}{i}": 1 for i in range(count)}, log


# -- producer ------------------------------------------------------------------------------


@authz_case("produce_metadata_refused")
def test_a_topic_the_metadata_refuses_fails_its_messages_at_once_until_the_acl_is_granted(outcome):
    ours, rdk = outcome
    for seen in (ours, rdk):
        # Every message fails with the broker's error at once (not message.timeout.ms),
        # later produce() calls raise it, and once granted the producer goes on.
        assert seen["refused_reports"] == {"TOPIC_AUTHORIZATION_FAILED": 10}, seen
        assert seen["flush_seconds"] < PROMPT_S, seen
        assert seen["later_produce_raised"] == "TOPIC_AUTHORIZATION_FAILED", seen
        # librdkafka asks for the topic again and again: a second after the grant it is
        # produced to (ours asked only at topic.metadata.refresh.interval.ms, 5 minutes)
        assert seen["granted_seconds"] < PROMPT_S, seen
        assert seen["after_reports"] == {"delivered": 10}, seen
        assert values(seen["log"], "refused-") == {} and values(seen["log"], "later-") == {}
        assert_written_once(seen["log"], "after-", 10)
        assert seen["errors"] == [] and seen["close_seconds"] < PROMPT_S, seen


@authz_case("idempotent_init_refused")
def test_an_idempotent_producer_refused_a_producer_id_stops_with_a_fatal_error(outcome):
    ours, rdk = outcome
    for seen in (ours, rdk):
        # librdkafka and the Java client: fatal at the first refusal, the queued messages
        # purged, produce() refused from then on, even once granted (ours retried
        # InitProducerId without a word while the messages waited for
        # message.timeout.ms)
        assert seen["flush_seconds"] < PROMPT_S and seen["left_after_flush"] == 0, seen
        assert set(seen["refused_reports"]) == {"_PURGE_QUEUE"}, seen
        assert seen["granted_produce_raised"] == "_FATAL", seen
        assert seen["log"] == {} and seen["refused_requests"] == 1, seen
        assert seen["close_seconds"] < PROMPT_S, seen
    # the fatal error is raised once, by the flush() that serves it (confluent-kafka raises
    # it inside the purged messages' delivery callbacks: a SystemError there)
    assert ours["flush_raised"] == {"error": "CLUSTER_AUTHORIZATION_FAILED", "fatal": True,
                                    "retriable": False, "abortable": False}, ours
    assert ours["refused_reports"] == {"_PURGE_QUEUE": 4}, ours


@pytest.mark.parametrize("error", [
    pytest.param("TRANSACTIONAL_ID", marks=authz_case("init_transactions_refused")),
    pytest.param("CLUSTER", marks=authz_case("init_transactions_cluster_refused"))])
def test_init_transactions_refused_is_fatal(outcome, error):
    ours, rdk = outcome
    for seen in (ours, rdk):
        refused = {"error": f"{error}_AUTHORIZATION_FAILED", "fatal": True,
                   "retriable": False, "abortable": False}
        assert seen["init"] == refused and seen["init_seconds"] < PROMPT_S, seen
        assert seen["produce_raised"] == "_FATAL", seen
        # granted: still fatal (a new producer is needed)
        assert seen["granted_init"] == refused and seen["granted_begin"] == refused, seen
        assert seen["granted_produce_raised"] == "_FATAL", seen
        assert seen["log"] == {} and seen["refused_requests"] == 1, seen
        assert seen["close_seconds"] < PROMPT_S, seen


@pytest.mark.parametrize("case, error", [
    with_case("produce_refused", "TOPIC_AUTHORIZATION_FAILED"),
    with_case("produce_refused_idempotent", "TOPIC_AUTHORIZATION_FAILED"),
    # a broker before Kafka 3.0, the idempotent producer without IDEMPOTENT_WRITE
    with_case("produce_cluster_refused_idempotent", "CLUSTER_AUTHORIZATION_FAILED")])
def test_a_produce_the_acls_refuse_fails_its_messages_at_once_and_the_producer_goes_on(
        outcome, case, error):
    ours, rdk = outcome
    for seen in (ours, rdk):
        # each refused message reported once, at once, with the broker's error; nothing
        # fatal, none written; once granted the same producer delivers
        assert seen["refused_reports"] == {"delivered": 4, error: 10}, seen
        assert seen["flush_seconds"] < PROMPT_S and seen["errors"] == [], seen
        assert seen["after_reports"] == {"delivered": 10}, seen
        assert seen["granted_seconds"] < PROMPT_S, seen
        assert_written_once(seen["log"], "before-", 4)
        assert_written_once(seen["log"], "after-", 10)
        assert values(seen["log"], "refused-") == {} and values(seen["log"], "later-") == {}
        assert seen["close_seconds"] < PROMPT_S, seen
        assert seen["init_producer_ids"] == 0, seen    # no epoch bump (see below)
    if error == "CLUSTER_AUTHORIZATION_FAILED":
        assert ours["later_reports"] == rdk["later_reports"] == {error: 1}, (ours, rdk)
        return
    # librdkafka marks the topic refused: produce() raises TOPIC_AUTHORIZATION_FAILED
    # until its metadata says otherwise. Ours takes the message and its delivery report
    # says TOPIC_AUTHORIZATION_FAILED, as promptly.
    assert rdk["later_produce_raised"] == "TOPIC_AUTHORIZATION_FAILED", rdk
    assert ours["later_produce_raised"] is None, ours
    assert ours["later_reports"] == {"TOPIC_AUTHORIZATION_FAILED": 1}, ours


@authz_case("produce_refused_beside_allowed_idempotent")
def test_an_idempotent_producer_refused_one_topic_writes_the_others_without_epoch_bumps(outcome):
    ours, rdk = outcome
    for seen in (ours, rdk):
        sent, reports = seen["sent"], seen["reports"]
        # every message reported once: the allowed topic's delivered, the refused one's
        # TOPIC_AUTHORIZATION_FAILED (librdkafka refuses most at produce() already)
        assert seen["left_after_flush"] == 0 and seen["errors"] == [], seen
        assert reports["ok delivered"] == sent["ok"] + 1, seen
        assert reports["t TOPIC_AUTHORIZATION_FAILED"] == sent["t"], seen
        assert seen["refused_written"] == 0, seen
        # granted: the refused topic is written to, exactly once, by the same producer
        assert seen["left_after_grant"] == 0 and seen["granted_reports"].get("t delivered")
        assert_written_once(seen["log"], "after-", 10)
        assert seen["close_seconds"] < PROMPT_S, seen
    # A refused batch leaves no gap to bump the epoch for (ours bumped after each: one
    # InitProducerId per two Produce requests, ~500 in 3 s, each a new producer id on a
    # Kafka broker). librdkafka bumps the epoch without asking the broker.
    assert ours["init_producer_ids"] == rdk["init_producer_ids"] == 0, (ours, rdk)


# -- transactions --------------------------------------------------------------------------


@authz_case("add_partitions_refused")
def test_a_partition_the_acls_refuse_to_a_transaction_makes_it_abortable(outcome):
    ours, rdk = outcome
    for seen in (ours, rdk):
        assert seen["commit"] == {"error": "TOPIC_AUTHORIZATION_FAILED", "fatal": False,
                                  "retriable": False, "abortable": True}, seen
        assert seen["commit_seconds"] < PROMPT_S, seen
        assert seen["refused_reports"] == {"_PURGE_QUEUE": 4}, seen
        assert values(seen["log"], "refused-") == {}, seen
    # Ours aborts without an EndTxn for a transaction the coordinator never started, and
    # the next one commits (reliability.md). librdkafka 2.16.0 sends that EndTxn, gets
    # INVALID_TXN_STATE, and is dead (fatal) from then on.
    assert rdk["abort"]["error"] == "INVALID_TXN_STATE" and rdk["abort"]["fatal"], rdk
    assert ours["abort"] is None and ours["close_raised"] is None, ours
    assert ours["granted_begin"] is None and ours["granted_commit"] is None, ours
    assert ours["granted_reports"] == {"delivered": 4}, ours
    assert_written_once(ours["log"], "granted-", 4)
    assert ours["close_seconds"] < PROMPT_S, ours


@pytest.mark.parametrize("api", [
    pytest.param("Produce", marks=authz_case("produce_refused_in_transaction")),
    pytest.param("Metadata", marks=authz_case("metadata_refused_in_transaction"))])
def test_a_topic_the_acls_refuse_inside_a_transaction_makes_it_abortable(outcome, api):
    ours, rdk = outcome
    # the commit names what failed: the broker's error, or (the messages never had a
    # partition) librdkafka's _INCONSISTENT, which ours raises too
    error = "TOPIC_AUTHORIZATION_FAILED" if api == "Produce" else "_INCONSISTENT"
    for seen in (ours, rdk):
        assert seen["commit"] == {"error": error, "fatal": False, "retriable": False,
                                  "abortable": True}, seen
        assert seen["refused_reports"] == {"TOPIC_AUTHORIZATION_FAILED": 4}, seen
        assert seen["commit_seconds"] < PROMPT_S and seen["abort"] is None, seen
        assert seen["granted_begin"] is None and seen["granted_commit"] is None, seen
        assert values(seen["log"], "refused-") == {}, seen
        assert seen["close_raised"] is None and seen["close_seconds"] < PROMPT_S, seen
    if api == "Produce":
        # right after the grant librdkafka still refuses produce() (it marked the topic
        # refused); ours produces, and the transaction commits
        assert rdk["granted_produce_raised"] == "TOPIC_AUTHORIZATION_FAILED", rdk
        assert ours["granted_produce_raised"] is None, ours
        assert_written_once(ours["log"], "granted-", 4)
    else:
        # both refuse produce() until their metadata is asked again: checked for each
        # whose client asked none between the grant and produce() (librdkafka asks again
        # on its own; on a loaded machine that came in between now and then)
        for seen in (ours, rdk):
            if not seen["metadata_asked_after_grant"]:
                assert seen["granted_produce_raised"] == "TOPIC_AUTHORIZATION_FAILED", seen


@pytest.mark.parametrize("case", [with_case("add_offsets_refused"),
                                  with_case("txn_offset_commit_refused"),
                                  with_case("end_txn_refused")])
def test_offsets_and_end_of_a_transaction_refused_as_librdkafka(outcome, case):
    """AddOffsetsToTxn or TxnOffsetCommit refused (GROUP_AUTHORIZATION_FAILED): abortable,
    and the next transaction commits its offsets once granted; EndTxn refused
    (TRANSACTIONAL_ID_AUTHORIZATION_FAILED): fatal. The same in both clients."""
    ours, rdk = outcome
    for seen in (ours, rdk):
        assert seen["seconds"] < PROMPT_S and seen["close_seconds"] < PROMPT_S, seen
        assert seen["refused_requests"] == 1, seen
    if case == "end_txn_refused":
        fatal = {"error": "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "fatal": True,
                 "retriable": False, "abortable": False}
        assert ours["commit"] == ours["abort"] == ours["granted_begin"] == fatal, ours
        assert ours["granted_produce_raised"] == "_FATAL", ours
    else:
        abortable = {"error": "GROUP_AUTHORIZATION_FAILED", "fatal": False,
                     "retriable": False, "abortable": True}
        assert ours["send_offsets"] == ours["commit"] == abortable, ours
        assert ours["abort"] is None and ours["granted_commit"] is None, ours
        assert ours["committed"] == [[0, 5], [1, 5]], ours
        assert_written_once(ours["log"], "granted-", 2)
        assert values(ours["log"], "refused-") == {}, ours
    timing = ("seconds", "close_seconds")
    assert {k: v for k, v in ours.items() if k not in timing} == \
        {k: v for k, v in rdk.items() if k not in timing}


# -- admin ---------------------------------------------------------------------------------


@pytest.mark.parametrize("case, refused", [
    with_case("describe_topics_refused", {"t": "TOPIC_AUTHORIZATION_FAILED"}),
    with_case("delete_topics_refused", {"d1": "TOPIC_AUTHORIZATION_FAILED",
                                        "d2": "TOPIC_AUTHORIZATION_FAILED"}),
    with_case("describe_configs_refused", {"t": "TOPIC_AUTHORIZATION_FAILED"}),
    with_case("create_partitions_refused", {"t": "TOPIC_AUTHORIZATION_FAILED"}),
    with_case("list_group_offsets_refused", {"g": "GROUP_AUTHORIZATION_FAILED"})])
def test_admin_operations_the_acls_refuse_fail_per_resource_at_once(outcome, case, refused):
    ours, rdk = outcome
    for seen in (ours, rdk):
        assert seen["refused"] == refused and seen["refused_seconds"] < PROMPT_S, seen
        assert seen["granted"] == {name: None for name in refused}, seen
    assert ours["refused_requests"] == 1, ours       # not retried


@pytest.mark.parametrize("error", [
    pytest.param("CLUSTER", marks=authz_case("create_topics_cluster_refused")),
    pytest.param("TOPIC", marks=authz_case("create_topics_topic_refused"))])
def test_create_topics_the_acls_refuse_fail_per_topic(outcome, error):
    ours, rdk = outcome
    for seen in (ours, rdk):
        assert seen["refused"] == {"a": f"{error}_AUTHORIZATION_FAILED",
                                   "b": f"{error}_AUTHORIZATION_FAILED"}, seen
        assert seen["refused_seconds"] < PROMPT_S and seen["refused_requests"] == 1, seen
        assert seen["granted"] == {"a": None, "b": None} and seen["topics"] == ["a", "b"]


# -- consumer ------------------------------------------------------------------------------


def assert_read_once_when_granted(seen: Dict[str, Any]) -> None:
    granted = seen["granted"]
    assert granted["messages"] == 10 and granted["duplicates"] == 0, seen
    assert granted["seconds"] < PROMPT_S and granted["events"] == {}, seen
    assert seen["close_seconds"] < PROMPT_S, seen


@pytest.mark.parametrize("case", [with_case("find_coordinator_refused"),
                                  with_case("join_group_refused"),
                                  with_case("offset_fetch_refused")])
def test_a_group_the_acls_refuse_is_one_error_event_and_the_consumer_goes_on_once_granted(
        outcome, case):
    ours, rdk = outcome
    for seen in (ours, rdk):
        events = seen["refused"]["events"]
        assert list(events) == ["GROUP_AUTHORIZATION_FAILED"], seen
        assert events["GROUP_AUTHORIZATION_FAILED"]["first"] < PROMPT_S, seen
        assert not events["GROUP_AUTHORIZATION_FAILED"]["fatal"], seen
        assert seen["refused"]["messages"] == 0 and seen["refused_errors"] == [], seen
    # Told once while it lasts (it was told at every retry: 11 FindCoordinator and 21
    # OffsetFetch refusals were as many error events in 8 s); librdkafka tells a lookup's
    # and the committed offsets' once, JoinGroup's at every attempt.
    assert ours["refused"]["events"]["GROUP_AUTHORIZATION_FAILED"]["count"] == 1, ours
    assert ours["refused_requests"] > 1, ours            # and asks again meanwhile
    assert_read_once_when_granted(ours)
    if case == "offset_fetch_refused":
        # librdkafka 2.16.0 asks for the committed offsets once and never again: the
        # assignment stays unread after the grant
        assert rdk["refused_requests"] == 1 and rdk["granted"]["messages"] == 0, rdk
    else:
        assert rdk["granted"]["messages"] == 10 and rdk["granted"]["duplicates"] == 0, rdk


@authz_case("subscribe_metadata_refused")
def test_a_subscribed_topic_the_metadata_refuses_is_one_error_event_until_granted(outcome):
    ours, rdk = outcome
    for seen in (ours, rdk):
        events = seen["refused"]["events"]
        assert list(events) == ["TOPIC_AUTHORIZATION_FAILED"], seen
        assert events["TOPIC_AUTHORIZATION_FAILED"]["count"] == 1, seen
        assert events["TOPIC_AUTHORIZATION_FAILED"]["first"] < PROMPT_S, seen
        assert not events["TOPIC_AUTHORIZATION_FAILED"]["fatal"], seen
    # Ours asks for the topic again (about once a second) and reads it as soon as granted;
    # librdkafka waits for topic.metadata.refresh.interval.ms (5 minutes)
    assert_read_once_when_granted(ours)
    assert rdk["granted"]["messages"] == 0, rdk


@authz_case("subscribe_one_topic_refused_beside_another")
def test_a_refused_topic_beside_an_allowed_one_in_a_subscription(outcome):
    ours, rdk = outcome
    for seen in (ours, rdk):
        # one event for the refused topic; the allowed one is read meanwhile
        assert list(seen["refused"]["events"]) == ["TOPIC_AUTHORIZATION_FAILED"], seen
        assert seen["refused"]["events"]["TOPIC_AUTHORIZATION_FAILED"]["count"] == 1, seen
        assert seen["refused_values"] == [f"ok{i}" for i in range(10)], seen
        assert seen["granted"]["duplicates"] == 0, seen
    # once granted, ours reads the refused topic too (within seconds), exactly once, and
    # nothing of the allowed one again; librdkafka waits for its periodic refresh (5 min)
    assert ours["granted_values"] == 20 and ours["granted"]["events"] == {}, ours
    assert rdk["granted_values"] == 10, rdk


@authz_case("auto_commit_refused")
def test_auto_commits_the_acls_refuse_go_to_on_commit_as_in_librdkafka(outcome):
    ours, rdk = outcome
    for seen in (ours, rdk):
        # each refused auto-commit reaches on_commit (no error event), and the next one
        # after the grant commits what was read
        assert seen["refused_commits"].get("GROUP_AUTHORIZATION_FAILED", 0) >= 5, seen
        assert set(seen["refused_commits"]) == {"GROUP_AUTHORIZATION_FAILED"}, seen
        assert seen["refused"]["events"] == {} and seen["refused_errors"] == [], seen
        assert seen["granted_commits"].get("committed"), seen
        assert seen["committed"] == [[0, 5], [1, 5]], seen
        assert seen["close_seconds"] < PROMPT_S, seen


@authz_case("assign_metadata_refused")
def test_an_assigned_topic_the_metadata_refuses_is_read_once_granted(outcome):
    ours, rdk = outcome
    for seen in (ours, rdk):
        # neither client tells (the partitions just have no leader yet)
        assert seen["refused"] == {"events": {}, "messages": 0, "duplicates": 0}, seen
        assert_read_once_when_granted(seen)


@authz_case("fetch_refused")
def test_a_fetch_the_acls_refuse_is_one_error_event_per_partition_until_granted(outcome):
    ours, rdk = outcome
    for seen in (ours, rdk):
        events = seen["refused"]["events"]
        assert list(events) == ["TOPIC_AUTHORIZATION_FAILED"], seen
        assert events["TOPIC_AUTHORIZATION_FAILED"]["count"] == 2, seen   # two partitions
        assert events["TOPIC_AUTHORIZATION_FAILED"]["first"] < PROMPT_S, seen
        assert seen["granted"]["messages"] == 10 and seen["granted"]["duplicates"] == 0
    # Ours fetches again after fetch.error.backoff.ms (librdkafka: ten times that after an
    # authorization error), so it reads sooner once granted.
    assert_read_once_when_granted(ours)


@authz_case("heartbeat_refused_classic")
def test_a_heartbeat_the_acls_refuse_leaves_a_classic_member_reading_as_librdkafka(outcome):
    ours, rdk = outcome
    for seen in (ours, rdk):
        # neither client tells (the Java client raises GroupAuthorizationException from
        # poll()); the member keeps its partitions and reads what comes meanwhile, once
        assert seen["refused"]["events"] == {} and seen["refused_errors"] == [], seen
        assert seen["read_in_all"] == 20 and seen["granted"]["duplicates"] == 0, seen
        assert seen["refused_requests"] > 1 and seen["close_seconds"] < PROMPT_S, seen


@authz_case("offset_commit_refused")
def test_a_commit_the_acls_refuse_fails_and_the_next_one_granted_succeeds(outcome):
    ours, rdk = outcome
    for seen in (ours, rdk):
        assert seen["read"]["messages"] == 10, seen
        assert seen["sync_commit"] == "GROUP_AUTHORIZATION_FAILED", seen
        assert seen["sync_commit_seconds"] < PROMPT_S, seen
        # the asynchronous one: its on_commit has the error, per partition too
        assert seen["commit_callbacks"] == [["GROUP_AUTHORIZATION_FAILED", [
            [0, 5, "GROUP_AUTHORIZATION_FAILED"], [1, 5, "GROUP_AUTHORIZATION_FAILED"]]]], seen
        assert seen["granted_commit"] == [[0, 5, None], [1, 5, None]], seen
        assert seen["committed"] == [[0, 5], [1, 5]], seen
        assert seen["close_seconds"] < PROMPT_S, seen
    # the same requests, to the same answers
    assert ours["refused_requests"] == rdk["refused_requests"] == 2, (ours, rdk)


@authz_case("heartbeat_topic_refused_consumer_protocol")
def test_a_consumer_group_heartbeat_refusing_a_subscribed_topic_is_one_event_until_granted(outcome):
    ours, rdk = outcome
    for seen in (ours, rdk):
        events = seen["refused"]["events"]
        assert list(events) == ["TOPIC_AUTHORIZATION_FAILED"], seen
        assert events["TOPIC_AUTHORIZATION_FAILED"]["first"] < PROMPT_S, seen
        assert not events["TOPIC_AUTHORIZATION_FAILED"]["fatal"], seen
        # the member heartbeats on and reads once granted, as the Java client
        # (KAFKA-18813) and librdkafka do (ours stopped following the group: nothing read
        # after the grant until subscribe() again)
        assert seen["refused_requests"] > 1, seen
        assert seen["granted"]["messages"] == 10 and seen["granted"]["duplicates"] == 0
    assert rdk["refused"]["events"]["TOPIC_AUTHORIZATION_FAILED"]["count"] >= 1   # every 3 s
    assert ours["refused"]["events"]["TOPIC_AUTHORIZATION_FAILED"]["count"] == 1, ours
    assert_read_once_when_granted(ours)


@authz_case("heartbeat_refused_consumer_protocol")
def test_a_consumer_group_heartbeat_refusing_the_group_stops_the_member_not_the_consumer(outcome):
    ours, rdk = outcome
    # librdkafka and the Java client: fatal, the consumer is done
    assert list(rdk["refused"]["events"]) == ["_FATAL"], rdk
    assert rdk["resubscribe_raised"]["error"] == "_FATAL", rdk
    # ours: one (not fatal) event, the member leaves the group; subscribe() again once
    # granted and it reads
    assert ours["refused"]["events"] == {"GROUP_AUTHORIZATION_FAILED": {
        "count": 1, "first": ours["refused"]["events"]["GROUP_AUTHORIZATION_FAILED"]["first"],
        "fatal": False}}, ours
    assert ours["refused_requests"] == 1 and ours["resubscribe_raised"] is None, ours
    assert_read_once_when_granted(ours)


@authz_case("list_offsets_refused")
def test_an_offset_lookup_the_acls_refuse_is_one_event_per_partition_until_granted(outcome):
    ours, rdk = outcome
    for seen in (ours, rdk):
        events = seen["refused"]["events"]
        assert list(events) == ["TOPIC_AUTHORIZATION_FAILED"], seen
        assert events["TOPIC_AUTHORIZATION_FAILED"]["first"] < PROMPT_S, seen
        assert seen["granted"]["messages"] == 10 and seen["granted"]["duplicates"] == 0
    # ours tells it once per partition while the lookups retry (with backoff); librdkafka
    # at every retry (about 100 events and ListOffsets in 5 s)
    assert ours["refused"]["events"]["TOPIC_AUTHORIZATION_FAILED"]["count"] == 2, ours
    assert_read_once_when_granted(ours)
