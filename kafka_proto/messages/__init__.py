"""Every Kafka request and response as a generated class, looked up by API key or name.

The classes live in ``kafka_proto.messages._generated`` (one module per API, written by
``tools/gen_messages.py``) and are imported lazily, so importing this package is cheap::

    from kafka_proto.messages import FetchRequest, request_class, API_KEYS

    req = FetchRequest(max_wait_ms=500, topics=[FetchRequest.FetchTopic(topic="t")])
    body = req.encode(11)
    same = request_class(1).decode(body, 11)

Each class has ``encode(version) -> bytes``, ``decode(buffer, version)``,
``encode_into(writer, version)``, ``decode_from(reader, version)``,
``encode_parts(version)`` (the body as a list of parts for ``socket.sendmsg``, big record
batches left uncopied; decoded records are memoryview slices of the input),
``decode_prefix(buffer, version)`` (the message and the bytes it took, later bytes
ignored) and the class attributes
``API_KEY``, ``API_NAME``, ``MIN_VERSION``, ``MAX_VERSION``, ``FLEXIBLE_MIN_VERSION`` (and
``LATEST_VERSION_UNSTABLE`` on requests). :func:`fit_to_version` makes a message filled
for its newest version encodable in an older one; :func:`error_codes` collects the error
codes of a response at every level.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Dict, Type, Union

from kafka_proto.errors import UnsupportedVersionError
from kafka_proto.messages._generated import API_KEYS, CLASS_MODULES, ApiInfo, ApiKey
from kafka_proto.messages._runtime import _Message, error_codes, fit_to_version

if TYPE_CHECKING:
    # The generated classes for type checkers, which cannot follow __getattr__ (a user's
    # `from kafka_proto.messages import FetchRequest` would otherwise be Any).
    from kafka_proto.messages._generated.classes import *

__all__ = [
    "API_KEYS",
    "API_KEYS_BY_NAME",
    "ApiInfo",
    "ApiKey",
    "api_info",
    "request_class",
    "response_class",
    "message_class",
    "request_header_version",
    "response_header_version",
    "fit_to_version",
    "error_codes",
    "RequestHeader",
    "ResponseHeader",
]

#: API name ("Fetch") -> API key (1).
API_KEYS_BY_NAME: Dict[str, int] = {info.name: key for key, info in API_KEYS.items()}

_PACKAGE = __name__ + "._generated."


def message_class(name: str) -> Type[_Message]:
    """Return a generated top-level class by name ("FetchRequest", "RequestHeader", ...)."""
    cached = globals().get(name)
    if isinstance(cached, type):
        return cached
    module = CLASS_MODULES.get(name)
    if module is None:
        raise KeyError(f"no generated message class named {name!r}")
    cls = getattr(importlib.import_module(_PACKAGE + module), name)
    globals()[name] = cls  # later lookups skip __getattr__
    return cls


def api_info(api: Union[int, str]) -> ApiInfo:
    """Facts about one API, by key (1) or name ("Fetch"); UnsupportedVersionError if unknown."""
    key = API_KEYS_BY_NAME.get(api) if isinstance(api, str) else api
    info = API_KEYS.get(key) if key is not None else None
    if info is None:
        raise UnsupportedVersionError(f"unknown API {api!r}")
    return info


def request_class(api: Union[int, str]) -> Type[_Message]:
    """The request class of an API, by key or name."""
    return message_class(api_info(api).name + "Request")


def response_class(api: Union[int, str]) -> Type[_Message]:
    """The response class of an API, by key or name."""
    return message_class(api_info(api).name + "Response")


def _flexible(info: ApiInfo, api_version: int) -> bool:
    if not info.min_version <= api_version <= info.max_version:
        raise UnsupportedVersionError(
            f"{info.name} has versions {info.min_version}-{info.max_version}, not {api_version}"
        )
    return info.flexible_min_version is not None and api_version >= info.flexible_min_version


def request_header_version(api_key: int, api_version: int) -> int:
    """Request header version: 2 for flexible versions, else 1 (ControlledShutdown v0: 0)."""
    info = api_info(api_key)
    flexible = _flexible(info, api_version)
    if api_key == ApiKey.CONTROLLED_SHUTDOWN and api_version == 0:
        return 0
    return 2 if flexible else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """Response header version: 1 for flexible versions, else 0 (ApiVersions: always 0)."""
    if api_key == ApiKey.API_VERSIONS:
        # KIP-511: a client must read the answer even when the broker rejects its version,
        # so this holds for versions we do not know either.
        return 0
    return 1 if _flexible(api_info(api_key), api_version) else 0


# Hidden from type checkers: they have every class from the import above, and a misspelt
# name is then an error for them instead of an Any.
if not TYPE_CHECKING:
    def __getattr__(name: str) -> Any:
        # Lazy import of generated classes: `from kafka_proto.messages import FetchRequest`.
        if name in CLASS_MODULES:
            return message_class(name)
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(CLASS_MODULES))
