"""ApiVersions negotiation with hand-made broker ranges."""
from __future__ import annotations

import pytest

from kafka_proto import messages as M
from kafka_proto.errors import UnsupportedVersionError
from kafka_proto.versions import (
    broker_ranges,
    client_ranges,
    negotiate,
    negotiate_response,
    require_version,
)

PRODUCE, FETCH, METADATA, API_VERSIONS, END_TXN, CGH, SHARE_FETCH = 0, 1, 3, 18, 26, 68, 78


def test_highest_common_version():
    broker = {PRODUCE: (3, 9), FETCH: (0, 20), METADATA: (0, 7)}
    assert negotiate(broker) == {PRODUCE: 9, FETCH: 17, METADATA: 7}


def test_no_overlap_or_unknown_key_is_left_out():
    ours = {PRODUCE: (0, 11), FETCH: (4, 17)}
    broker = {PRODUCE: (12, 14), FETCH: (0, 4), 999: (0, 3)}
    assert negotiate(broker, ours=ours) == {FETCH: 4}
    # keys we know but the broker does not list
    assert negotiate({}, ours=ours) == {}


def test_wanted_limits_the_result():
    broker = {PRODUCE: (0, 9), FETCH: (0, 12), METADATA: (0, 12)}
    assert negotiate(broker, wanted=[FETCH, 42]) == {FETCH: 12}
    assert negotiate(broker, wanted=iter([METADATA, PRODUCE])) == {PRODUCE: 9, METADATA: 12}


def test_unstable_latest_version_only_when_asked():
    info = M.API_KEYS[END_TXN]
    assert info.latest_version_unstable and info.max_version == 5
    broker = {END_TXN: (0, 5), CGH: (0, 1), SHARE_FETCH: (0, 0)}
    assert negotiate(broker) == {END_TXN: 4, CGH: 0}
    assert negotiate(broker, allow_unstable=True) == {END_TXN: 5, CGH: 1, SHARE_FETCH: 0}
    # An API whose only version is unstable is not ours unless asked.
    assert SHARE_FETCH not in client_ranges()
    assert client_ranges(allow_unstable=True)[SHARE_FETCH] == (0, 0)


def test_client_ranges_match_the_generated_classes():
    ranges = client_ranges(allow_unstable=True)
    assert len(ranges) == 88
    assert ranges[FETCH] == (M.FetchRequest.MIN_VERSION, M.FetchRequest.MAX_VERSION) == (0, 17)
    assert client_ranges()[FETCH] == (0, 17)  # Fetch v17 is stable


def test_from_api_versions_response():
    cls = M.ApiVersionsResponse
    resp = cls(api_keys=[cls.ApiVersion(api_key=FETCH, min_version=4, max_version=13),
                         cls.ApiVersion(api_key=API_VERSIONS, min_version=0, max_version=3),
                         cls.ApiVersion(api_key=METADATA, min_version=5, max_version=2)])
    # A broker answer, through the wire and back.
    resp = cls.decode(resp.encode(3), 3)
    assert broker_ranges(resp) == {FETCH: (4, 13), API_VERSIONS: (0, 3)}
    assert negotiate_response(resp) == {FETCH: 13, API_VERSIONS: 3}
    assert negotiate_response(resp, wanted=[API_VERSIONS]) == {API_VERSIONS: 3}


def test_require_version():
    negotiated = {FETCH: 11}
    assert require_version(negotiated, FETCH) == 11
    assert require_version(negotiated, FETCH, min_version=4) == 11
    with pytest.raises(UnsupportedVersionError, match="Fetch"):
        require_version(negotiated, FETCH, min_version=12)
    with pytest.raises(UnsupportedVersionError, match="Metadata"):
        require_version(negotiated, METADATA)


def test_api_versions_error_answer_is_read_as_v0():
    cls = M.ApiVersionsResponse
    from kafka_proto.versions import decode_api_versions_response

    v0 = cls(error_code=35, api_keys=[cls.ApiVersion(api_key=API_VERSIONS, min_version=0,
                                                     max_version=2)])
    # The broker answered a v3 request with a v0 body: a plain v3 decode cannot read it.
    data = v0.encode(0)
    resp = decode_api_versions_response(data, 3)
    assert resp.error_code == 35 and broker_ranges(resp) == {API_VERSIONS: (0, 2)}
    # A normal v3 answer, and a v3 answer with an error that is not a v0 body.
    ok = cls(api_keys=[cls.ApiVersion(api_key=FETCH, min_version=0, max_version=16)],
             throttle_time_ms=5)
    assert decode_api_versions_response(ok.encode(3), 3) == ok
    err = cls(error_code=7, throttle_time_ms=5, finalized_features_epoch=3)
    assert decode_api_versions_response(err.encode(3), 3) == err
