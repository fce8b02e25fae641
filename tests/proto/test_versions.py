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

PRODUCE, FETCH, METADATA, API_VERSIONS, END_TXN, CGH = 0, 1, 3, 18, 26, 68
INIT_SHARE_STATE, SHARE_FETCH = 83, 78


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
    broker = {END_TXN: (0, 5), CGH: (0, 1), INIT_SHARE_STATE: (0, 0)}
    assert negotiate(broker) == {END_TXN: 4, CGH: 0}
    assert negotiate(broker, allow_unstable=True) == {END_TXN: 5, CGH: 1, INIT_SHARE_STATE: 0}
    # An API whose only version is unstable is not ours unless asked.
    assert INIT_SHARE_STATE not in client_ranges()
    assert client_ranges(allow_unstable=True)[INIT_SHARE_STATE] == (0, 0)
    # ShareFetch v1 is stable (KIP-932 in Kafka 4.1, gen_messages.AMENDMENTS), v0 too.
    assert client_ranges()[SHARE_FETCH] == (0, 1)


def test_client_ranges_match_the_generated_classes():
    ranges = client_ranges(allow_unstable=True)
    assert len(ranges) == 91
    # Stable, unlike Kafka 4.0's early-access share APIs.
    assert client_ranges()[M.ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS] == (0, 0)
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


# --------------------------------------------------------------------------- ApiVersions retry


def _answer(error_code=0, api_versions_max=None, version=3):
    """An ApiVersionsResponse as a broker sends it (through the wire and back)."""
    cls = M.ApiVersionsResponse
    keys = [cls.ApiVersion(api_key=FETCH, min_version=0, max_version=12)]
    if api_versions_max is not None:
        keys.append(cls.ApiVersion(api_key=API_VERSIONS, min_version=0,
                                   max_version=api_versions_max))
    resp = cls(error_code=error_code, api_keys=keys)
    return cls.decode(resp.encode(version), version)


def test_api_versions_retry_final_answers():
    from kafka_proto.versions import api_versions_retry

    assert api_versions_retry(_answer(api_versions_max=4), 4) is None
    assert api_versions_retry(_answer(api_versions_max=4), 3) is None  # we asked lower
    assert api_versions_retry(_answer(), 3) is None  # no ApiVersions entry: nothing to doubt
    # another error: final, the caller reports it
    assert api_versions_retry(_answer(error_code=7, api_versions_max=2), 3) is None
    # an answer at v0, decodable: final
    assert api_versions_retry(_answer(api_versions_max=0, version=0), 0) is None


def test_api_versions_retry_unsupported_version():
    from kafka_proto.versions import api_versions_retry

    # KIP-511: a v0 error body listing the broker's range for ApiVersions
    assert api_versions_retry(_answer(35, api_versions_max=2, version=0), 4, {4}) == 2
    # its maximum is capped at ours (a broker newer than us)
    assert api_versions_retry(_answer(35, api_versions_max=9, version=0), 4, our_max=3) == 3
    ours = M.ApiVersionsRequest.MAX_VERSION  # the default of our_max
    assert ours == M.API_KEYS[API_VERSIONS].max_version == 4
    assert api_versions_retry(_answer(35, api_versions_max=9, version=0), 7) == ours
    # ... and the capped version was the one just refused: v0
    assert api_versions_retry(_answer(35, api_versions_max=9, version=0), ours) == 0
    # no range given (old brokers): v0
    assert api_versions_retry(_answer(35, version=0), 4) == 0
    assert api_versions_retry(_answer(35, api_versions_max=0, version=0), 4) == 0


def test_api_versions_retry_answer_above_the_brokers_range():
    from kafka_proto.versions import api_versions_retry

    # Tansu 0.6: answers v4 without error while listing ApiVersions up to v3
    assert api_versions_retry(_answer(api_versions_max=3), 4, {4}) == 3
    assert api_versions_retry(_answer(api_versions_max=1), 3) == 1


def test_api_versions_retry_undecodable_answer():
    from kafka_proto.versions import api_versions_retry

    assert api_versions_retry(None, 4, {4}) == 0
    assert api_versions_retry(None, 2, {4, 2}) == 0
    # v0 itself undecodable: nothing left, the decode error is final
    assert api_versions_retry(None, 0, {4, 0}) is None
    with pytest.raises(UnsupportedVersionError):
        api_versions_retry(None, 3, {4, 0, 3})  # v0 was tried already


def test_api_versions_retry_never_asks_twice():
    from kafka_proto.versions import api_versions_retry

    # the advertised maximum was tried already: fall back to v0
    assert api_versions_retry(_answer(35, api_versions_max=2, version=0), 3, {4, 2, 3}) == 0
    assert api_versions_retry(_answer(api_versions_max=2), 3, {2, 3}) == 0
    # the version just asked counts as tried even when not listed
    assert api_versions_retry(_answer(35, api_versions_max=3, version=0), 3) == 0
    # v0 too: no version left
    with pytest.raises(UnsupportedVersionError, match="ApiVersions"):
        api_versions_retry(_answer(35, api_versions_max=2, version=0), 1, {4, 2, 0, 1})
    with pytest.raises(UnsupportedVersionError):
        api_versions_retry(_answer(35, version=0), 0, {4, 0})


def test_api_versions_retry_walk_ends():
    """Driven like a connection: every broker behaviour ends in a final answer or an
    error within a few requests, and never asks a version twice."""
    from kafka_proto.versions import api_versions_retry

    def broker(max_known, layout_bug=False):
        def answer(version):
            if version > max_known:
                if layout_bug:
                    return None  # answers in a layout we cannot read
                return _answer(35, api_versions_max=max_known, version=0)
            return _answer(api_versions_max=max_known, version=version)
        return answer

    for max_known in range(0, 5):
        for bug in (False, True):
            answer = broker(max_known, bug)
            version, tried = 4, set()
            for _ in range(5):
                tried.add(version)
                nxt = api_versions_retry(answer(version), version, tried, our_max=4)
                if nxt is None:
                    break
                assert nxt not in tried
                version = nxt
            else:
                pytest.fail("no final answer")
            assert version == (max_known if not bug else (4 if max_known == 4 else 0))
