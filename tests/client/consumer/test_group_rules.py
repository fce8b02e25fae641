"""Group membership rules checked without a broker: the coordinator's state machine fed
the answers a broker gives."""
from __future__ import annotations

import types

from kafka_client.config import ClientConfig
from kafka_client.consumer.group import STABLE, UNJOINED, GroupCoordinator
from kafka_client.errors import KafkaError


class FakeIO:
    def __init__(self):
        self.calls = []

    def add_tick(self, fn):
        pass

    def wake(self):
        pass

    def call_soon(self, fn, *args):
        self.calls.append((fn, args))

    def call_later(self, delay, fn, *args):
        self.calls.append((fn, args))


def coordinator(strategy):
    cfg = ClientConfig.from_dict({"bootstrap.servers": "127.0.0.1:1", "group.id": "g",
                                  "partition.assignment.strategy": strategy},
                                 role="consumer")
    cluster = types.SimpleNamespace(settings=types.SimpleNamespace(request_timeout=30.0),
                                    on_metadata=[])
    errors = []
    g = GroupCoordinator(cfg, cluster, FakeIO(), types.SimpleNamespace(parts={}),
                         lambda: None, errors.append)
    g.patterns = ["t"]
    g.member_id, g.generation, g.state = "m-1", 7, STABLE
    g.owned = {("t", 0), ("t", 1)}
    return g, errors


def test_cooperative_member_unknown_to_the_group_loses_its_partitions():
    g, _ = coordinator("cooperative-sticky")
    g.state = "JOINING"
    g._join_failed(KafkaError(KafkaError.UNKNOWN_MEMBER_ID))
    assert g.state == UNJOINED and g.owned == set()
    assert g.member_id == "" and g.generation == -1
    kind, tps, lost = g.app_events[0]
    assert kind == "revoke" and lost is True
    assert sorted((tp.topic, tp.partition) for tp in tps) == [("t", 0), ("t", 1)]


def test_eager_heartbeat_rebalance_revokes_everything_first():
    g, _ = coordinator("range")
    g._on_heartbeat(types.SimpleNamespace(error_code=KafkaError.REBALANCE_IN_PROGRESS), None,
                    g._op_token)
    assert g.state == "WAIT_REVOKE" and g.owned == set()
    kind, tps, lost = g.app_events[0]
    assert kind == "revoke" and lost is False and len(tps) == 2


def test_cooperative_heartbeat_rebalance_keeps_the_partitions():
    g, _ = coordinator("cooperative-sticky")
    g._on_heartbeat(types.SimpleNamespace(error_code=KafkaError.REBALANCE_IN_PROGRESS), None,
                    g._op_token)
    assert g.state == UNJOINED and g.owned == {("t", 0), ("t", 1)}
    assert not g.app_events
