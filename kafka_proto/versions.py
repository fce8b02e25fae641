"""ApiVersions negotiation: pick, per API key, the highest version both sides support.

The broker's ranges come from an ApiVersionsResponse; ours come from the generated message
classes (``kafka_proto.messages.API_KEYS``). A version the schemas mark as
``latestVersionUnstable`` is only chosen when ``allow_unstable=True``.
:func:`api_versions_retry` decides whether the ApiVersions exchange itself must be asked
again in another version.
"""
from __future__ import annotations

from typing import AbstractSet, Any, Dict, Iterable, Mapping, Optional, Tuple, Union

from kafka_proto.errors import ErrorCode, ProtocolDecodeError, UnsupportedVersionError
from kafka_proto.messages import API_KEYS, ApiKey, ApiVersionsResponse

__all__ = [
    "api_versions_retry",
    "decode_api_versions_response",
    "client_ranges",
    "broker_ranges",
    "negotiate",
    "negotiate_response",
    "require_version",
]

VersionRange = Tuple[int, int]


def client_ranges(allow_unstable: Union[bool, AbstractSet[int]] = False
                  ) -> Dict[int, VersionRange]:
    """Versions this codec can speak, per API key.

    Without ``allow_unstable`` the latest version of an API marked unstable is left out (and
    an API whose only version is unstable is left out entirely); ``allow_unstable`` may
    also be the set of API keys whose unstable version is allowed.
    """
    every = allow_unstable is True
    some = () if isinstance(allow_unstable, bool) else allow_unstable
    out = {}
    for key, info in API_KEYS.items():
        hi = info.max_version
        if info.latest_version_unstable and not (every or key in some):
            hi -= 1
        if hi >= info.min_version:
            out[key] = (info.min_version, hi)
    return out


def broker_ranges(response: Any) -> Dict[int, VersionRange]:
    """{api_key: (min, max)} from a decoded ApiVersionsResponse (its ``api_keys`` list).

    Entries whose minimum exceeds their maximum are dropped; a key listed twice keeps
    the last entry.
    """
    out = {}
    for entry in response.api_keys or ():
        if entry.min_version <= entry.max_version:
            out[entry.api_key] = (entry.min_version, entry.max_version)
    return out


def decode_api_versions_response(buffer: Any, version: int) -> Any:
    """Decode an ApiVersionsResponse body sent in answer to a request of ``version``.

    A broker that does not support the requested version answers with a v0 body carrying
    an error code (UNSUPPORTED_VERSION) and its own ranges (KIP-511). So when the error code
    is not zero the body is read as v0 first, and as ``version`` if that does not fit.
    """
    view = memoryview(buffer)
    if len(view) >= 2 and view[0:2] != b"\x00\x00" and version != 0:
        try:
            return ApiVersionsResponse.decode(view, 0)
        except ProtocolDecodeError:
            pass
    return ApiVersionsResponse.decode(view, version)


def api_versions_retry(
    response: Optional[Any],
    version: int,
    tried: AbstractSet[int] = frozenset(),
    our_max: Optional[int] = None,
) -> Optional[int]:
    """The ApiVersions version to ask again with, or None when there is nothing to retry.

    ``response`` is the decoded answer to an ApiVersionsRequest of ``version`` (see
    :func:`decode_api_versions_response`), or None when it could not be decoded in that
    version's layout. ``tried`` holds the versions already asked on this connection
    (``version`` counts as tried anyway); ``our_max`` is the highest ApiVersions version
    we speak (default: the generated class's). The rule (KIP-511):

    * error UNSUPPORTED_VERSION: the broker's own maximum for ApiVersions from the
      answer's list, at most ``our_max``; v0 when the list does not give one;
    * no error, but the broker's maximum is below ``version`` (Tansu 0.6 answers a version
      it does not know, in its own latest layout): that maximum, to be sure of the layout;
    * not decodable (``response is None``): v0, whose layout every broker knows; None if
      ``version`` was 0 already (the decode error is final);
    * otherwise None: the answer is final (any other error code is the caller's to report).

    A version already tried is replaced by v0; when v0 was tried too, no version is left
    and :class:`UnsupportedVersionError` is raised. Pure function: no I/O, no state.
    """
    if response is None:
        if version == 0:
            return None
        retry = 0
    else:
        theirs = {k.api_key: k.max_version for k in response.api_keys or ()}
        their_max = theirs.get(ApiKey.API_VERSIONS)
        if response.error_code == ErrorCode.UNSUPPORTED_VERSION:
            if our_max is None:
                our_max = API_KEYS[ApiKey.API_VERSIONS].max_version
            retry = min(their_max or 0, our_max)
        elif (response.error_code == ErrorCode.NONE and their_max is not None
              and their_max < version):
            retry = their_max
        else:
            return None
    if retry == version or retry in tried:
        retry = 0
        if retry == version or retry in tried:
            raise UnsupportedVersionError(
                f"no ApiVersions version left to try (tried {sorted(set(tried) | {version})})")
    return retry


def negotiate(
    broker_ranges: Mapping[int, VersionRange],
    wanted: Optional[Iterable[int]] = None,
    *,
    allow_unstable: Union[bool, AbstractSet[int]] = False,
    ours: Optional[Mapping[int, VersionRange]] = None,
) -> Dict[int, int]:
    """For each API key both sides support, the highest version in common.

    ``broker_ranges`` maps API key -> (min, max) as the broker advertised it; ``wanted``
    limits the result to those keys (default: every key). ``ours`` replaces this codec's
    own ranges (default :func:`client_ranges`). Keys with no common version are absent
    from the result.
    """
    mine = client_ranges(allow_unstable) if ours is None else ours
    keys = broker_ranges.keys() if wanted is None else wanted
    out = {}
    for key in keys:
        theirs = broker_ranges.get(key)
        local = mine.get(key)
        if theirs is None or local is None:
            continue
        lo = max(theirs[0], local[0])
        hi = min(theirs[1], local[1])
        if lo <= hi:
            out[key] = hi
    return dict(sorted(out.items()))


def negotiate_response(
    response: Any,
    wanted: Optional[Iterable[int]] = None,
    *,
    allow_unstable: bool = False,
) -> Dict[int, int]:
    """:func:`negotiate` straight from a decoded ApiVersionsResponse."""
    return negotiate(broker_ranges(response), wanted, allow_unstable=allow_unstable)


def require_version(negotiated: Mapping[int, int], api_key: int, min_version: int = 0) -> int:
    """The negotiated version of an API, or UnsupportedVersionError naming it."""
    version = negotiated.get(api_key)
    if version is None or version < min_version:
        info = API_KEYS.get(api_key)
        name = info.name if info is not None else f"API key {api_key}"
        need = f" >= {min_version}" if min_version else ""
        raise UnsupportedVersionError(f"broker and client share no version{need} of {name}")
    return version
