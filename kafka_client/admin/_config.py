"""Configuration resources and entries: what ``describe_configs()`` returns and what
``alter_configs()`` / ``incremental_alter_configs()`` take."""
from __future__ import annotations

import functools
from typing import Any, Dict, List, Optional, Union

from kafka_client._model import _OrderedEnum
from kafka_client.admin._resource import ResourceType, to_enum
from kafka_proto import enums as wire

__all__ = ["AlterConfigOpType", "ConfigSource", "ConfigEntry", "ConfigResource"]


class AlterConfigOpType(_OrderedEnum):
    """What ``incremental_alter_configs()`` does with one entry: SET its value, DELETE it
    (back to the default), APPEND to or SUBTRACT from a list value."""

    SET = wire.AlterConfigOp.SET.value
    DELETE = wire.AlterConfigOp.DELETE.value
    APPEND = wire.AlterConfigOp.APPEND.value
    SUBTRACT = wire.AlterConfigOp.SUBTRACT.value


class ConfigSource(_OrderedEnum):
    """Where a described configuration value comes from (the broker's numbering)."""

    UNKNOWN_CONFIG = wire.ConfigSource.UNKNOWN.value
    DYNAMIC_TOPIC_CONFIG = wire.ConfigSource.TOPIC_CONFIG.value
    DYNAMIC_BROKER_CONFIG = wire.ConfigSource.DYNAMIC_BROKER_CONFIG.value
    DYNAMIC_DEFAULT_BROKER_CONFIG = wire.ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    STATIC_BROKER_CONFIG = wire.ConfigSource.STATIC_BROKER_CONFIG.value
    DEFAULT_CONFIG = wire.ConfigSource.DEFAULT_CONFIG.value
    GROUP_CONFIG = wire.ConfigSource.GROUP_CONFIG.value


class ConfigEntry:
    """One configuration property: returned by ``describe_configs()``, and given to
    ``incremental_alter_configs()`` with an ``incremental_operation``.

    ``value`` is None when unset or sensitive (``is_sensitive``); ``synonyms`` maps the
    names this value was also set under (broker-level sources, by precedence) to their
    entries.
    """

    def __init__(self, name: str, value: Optional[str],
                 source: ConfigSource = ConfigSource.UNKNOWN_CONFIG,
                 is_read_only: bool = False, is_default: bool = False,
                 is_sensitive: bool = False, is_synonym: bool = False,
                 synonyms: Optional[Dict[str, "ConfigEntry"]] = None,
                 incremental_operation: Optional[AlterConfigOpType] = None) -> None:
        self.name = name
        self.value = value
        self.source = source
        self.is_read_only = bool(is_read_only)
        self.is_default = bool(is_default)
        self.is_sensitive = bool(is_sensitive)
        self.is_synonym = bool(is_synonym)
        self.synonyms: Dict[str, ConfigEntry] = {} if synonyms is None else synonyms
        self.incremental_operation = incremental_operation

    def __repr__(self) -> str:
        return f'ConfigEntry({self.name}="{self.value}")'

    def __str__(self) -> str:
        return f'{self.name}="{self.value}"'


@functools.total_ordering
class ConfigResource:
    """A resource with configuration: ``ConfigResource(restype, name, set_config=None,
    described_configs=None, error=None, incremental_configs=None)``.

    ``restype`` is a :class:`ResourceType` (or its name, or number); for BROKER the name
    is the broker id. ``set_config`` is the full configuration for ``alter_configs()``,
    ``incremental_configs`` the :class:`ConfigEntry` changes for
    ``incremental_alter_configs()``. Equal (and hashed) by type and name.
    """

    Type = ResourceType

    def __init__(self, restype: Union[ResourceType, str, int], name: str,
                 set_config: Optional[Dict[str, str]] = None,
                 described_configs: Optional[Dict[str, ConfigEntry]] = None,
                 error: Any = None,
                 incremental_configs: Optional[List[ConfigEntry]] = None) -> None:
        if name is None:
            raise ValueError("Expected resource name to be a string")
        if isinstance(restype, str):
            try:
                restype = ResourceType[restype.upper()]
            except KeyError:
                raise ValueError(f'Unknown resource type "{restype}": should be a '
                                 f"ConfigResource.Type")
        else:
            restype = to_enum(restype, ResourceType)
        self.restype = restype
        self.restype_int = int(restype.value)
        self.name = name
        self.set_config_dict: Dict[str, str] = dict(set_config) if set_config else {}
        self.incremental_configs: List[ConfigEntry] = list(incremental_configs or [])
        self.configs = described_configs
        self.error = error

    def __repr__(self) -> str:
        if self.error is not None:
            return f"ConfigResource({self.restype},{self.name},{self.error!r})"
        return f"ConfigResource({self.restype},{self.name})"

    def __hash__(self) -> int:
        return hash((self.restype, self.name))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConfigResource):
            return NotImplemented
        return (self.restype, self.name) == (other.restype, other.name)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, ConfigResource):
            return NotImplemented
        return (self.restype.value, self.name) < (other.restype.value, other.name)

    def __len__(self) -> int:
        """Number of entries in ``set_config``."""
        return len(self.set_config_dict)

    def set_config(self, name: str, value: str, overwrite: bool = True) -> None:
        """Set an entry for ``alter_configs()`` (kept if present and not ``overwrite``).

        ``alter_configs()`` replaces the whole configuration: entries left out return to
        their defaults.
        """
        if not overwrite and name in self.set_config_dict:
            return
        self.set_config_dict[name] = value

    def add_incremental_config(self, config_entry: ConfigEntry) -> None:
        """Add a change for ``incremental_alter_configs()`` (the entry's
        ``incremental_operation`` says which)."""
        self.incremental_configs.append(config_entry)
