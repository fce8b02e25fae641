"""The generated broker error table."""
from __future__ import annotations

from kafka_proto.errors import ERRORS_BY_CODE, ERRORS_BY_NAME
from kafka_proto.errors import BrokerError, broker_error


def test_table_shape():
    assert sorted(ERRORS_BY_CODE) == list(range(-1, 129))
    assert len(ERRORS_BY_NAME) == 130
    assert sum(e.retriable for e in ERRORS_BY_CODE.values()) == 31
    for code, err in ERRORS_BY_CODE.items():
        assert isinstance(err, BrokerError) and err.code == code
        assert ERRORS_BY_NAME[err.name] is err


def test_known_rows():
    assert ERRORS_BY_CODE[0] == BrokerError(0, "NONE", False)
    assert ERRORS_BY_CODE[-1] == BrokerError(-1, "UNKNOWN_SERVER_ERROR", False)
    assert ERRORS_BY_CODE[1] == BrokerError(1, "OFFSET_OUT_OF_RANGE", False)
    assert ERRORS_BY_CODE[6] == BrokerError(6, "NOT_LEADER_OR_FOLLOWER", True)
    assert ERRORS_BY_NAME["NOT_COORDINATOR"].retriable is True
    assert ERRORS_BY_NAME["TOPIC_AUTHORIZATION_FAILED"].retriable is False
    assert ERRORS_BY_NAME["OUT_OF_ORDER_SEQUENCE_NUMBER"].code == 45


def test_broker_error_lookup():
    assert broker_error(6).name == "NOT_LEADER_OR_FOLLOWER"
    unknown = broker_error(5000)
    assert unknown == BrokerError(5000, "UNKNOWN_ERROR_5000", False)
