"""SASL/SCRAM credential types (KIP-554): what ``describe_user_scram_credentials()``
returns and what ``alter_user_scram_credentials()`` takes.

An upsertion carries the password; the client sends only the salt, the iteration count
and the salted password (RFC 5802's ``Hi(password, salt, i)``), as the Java client and
librdkafka do, so the password itself never reaches the broker.
"""
from __future__ import annotations

import os
from typing import List, Optional

from kafka_client._model import _OrderedEnum
from kafka_client._net.security.sasl import SCRAM_HASHES, scram_salted_password
from kafka_proto import enums as wire

__all__ = [
    "ScramMechanism",
    "ScramCredentialInfo",
    "UserScramCredentialsDescription",
    "UserScramCredentialAlteration",
    "UserScramCredentialUpsertion",
    "UserScramCredentialDeletion",
    "salted_password",
]

#: Bytes of the salt generated when an upsertion gives none.
SALT_BYTES = 32


class ScramMechanism(_OrderedEnum):
    """A SASL/SCRAM mechanism (the numbers are the protocol's)."""

    UNKNOWN = wire.ScramMechanism.UNKNOWN.value
    SCRAM_SHA_256 = wire.ScramMechanism.SCRAM_SHA_256.value
    SCRAM_SHA_512 = wire.ScramMechanism.SCRAM_SHA_512.value

    @property
    def sasl_name(self) -> Optional[str]:
        """The SASL name (``SCRAM-SHA-256``), None for UNKNOWN."""
        return None if self is ScramMechanism.UNKNOWN else self.name.replace("_", "-")


class ScramCredentialInfo:
    """A credential's ``mechanism`` (:class:`ScramMechanism`) and ``iterations``."""

    def __init__(self, mechanism: ScramMechanism, iterations: int) -> None:
        self.mechanism = mechanism
        self.iterations = iterations

    def __repr__(self) -> str:
        return f"ScramCredentialInfo({self.mechanism}, {self.iterations})"


class UserScramCredentialsDescription:
    """The SCRAM credentials of one ``user``: ``scram_credential_infos``, a list of
    :class:`ScramCredentialInfo` (never the salt or the keys)."""

    def __init__(self, user: str, scram_credential_infos: List[ScramCredentialInfo]) -> None:
        self.user = user
        self.scram_credential_infos = scram_credential_infos

    def __repr__(self) -> str:
        return f"UserScramCredentialsDescription({self.user!r}, {self.scram_credential_infos!r})"


class UserScramCredentialAlteration:
    """Base of :class:`UserScramCredentialUpsertion` and
    :class:`UserScramCredentialDeletion`: the ``user`` concerned."""

    def __init__(self, user: str) -> None:
        self.user = user


class UserScramCredentialUpsertion(UserScramCredentialAlteration):
    """Set (or replace) ``user``'s credential for ``scram_credential_info``'s mechanism
    and iteration count from ``password`` (bytes). ``salt`` (bytes) is generated at random
    when None."""

    def __init__(self, user: str, scram_credential_info: ScramCredentialInfo,
                 password: bytes, salt: Optional[bytes] = None) -> None:
        super().__init__(user)
        self.scram_credential_info = scram_credential_info
        self.password = password
        self.salt = salt

    def __repr__(self) -> str:  # never the password
        return f"UserScramCredentialUpsertion({self.user!r}, {self.scram_credential_info!r})"


class UserScramCredentialDeletion(UserScramCredentialAlteration):
    """Remove ``user``'s credential for ``mechanism``."""

    def __init__(self, user: str, mechanism: ScramMechanism) -> None:
        super().__init__(user)
        self.mechanism = mechanism

    def __repr__(self) -> str:
        return f"UserScramCredentialDeletion({self.user!r}, {self.mechanism})"


def salted_password(upsertion: UserScramCredentialUpsertion) -> "tuple[bytes, bytes]":
    """``(salt, salted password)`` for an upsertion whose input was checked: its own salt
    or a random one, and PBKDF2 with the mechanism's HMAC over the password."""
    info = upsertion.scram_credential_info
    salt = upsertion.salt if upsertion.salt is not None else os.urandom(SALT_BYTES)
    hash_name = SCRAM_HASHES[info.mechanism.sasl_name]  # type: ignore[index]
    return salt, scram_salted_password(hash_name, upsertion.password, salt, info.iterations)
