"""SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka speaks it: credentials, server and client.

Invariants:

- A credential is only ever the salted keys ``(salt, stored_key, server_key, iterations)``; no password or
  salted password is kept. Its text form is Kafka's (``ScramCredentialUtils``):
  ``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>``.
- The server accepts only the GS2 header ``n,,`` or ``n,a=<authzid>,`` (no channel binding), and an authzid
  only when it equals the username. Extensions other than none are refused (no delegation tokens).
- The client-final message must carry the combined nonce this exchange issued (client nonce + our server
  nonce); a client-final from another exchange (a replayed client nonce) fails.
- An unknown user gets a server-first that looks like a real one (a salt derived from the name with a
  per-process secret, so it is the same on every attempt) and fails at the proof, exactly as a wrong
  password does: the exchange never tells whether a user exists.
- Every failure raises :class:`SaslAuthenticationError` with Kafka's one message; no I/O, no clock (nonces
  come from :mod:`secrets`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, TypeAlias

__all__ = [
    "MAX_ITERATIONS",
    "MIN_ITERATIONS",
    "SCRAM_MECHANISMS",
    "CredentialLookup",
    "SaslAuthenticationError",
    "ScramClient",
    "ScramCredential",
    "ScramMechanism",
    "ScramServer",
    "failure_message",
    "salted_password",
]

MIN_ITERATIONS: Final = 4096
"""Kafka's ``ScramMechanism.minIterations`` (RFC 7677's floor)."""
MAX_ITERATIONS: Final = 16384
"""Kafka's ``ScramMechanism.maxIterations``: AlterUserScramCredentials refuses more."""


class SaslAuthenticationError(Exception):
    """A SASL exchange failed; ``str()`` is what the client is told (never whether the user exists)."""


def failure_message(mechanism: str) -> str:
    """Kafka's answer to every failed authentication, whatever the cause."""
    return f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    """One SCRAM mechanism: its SASL name, hash, and KIP-554 wire id (``ScramMechanism.type``)."""

    name: str
    hash_name: str
    wire_type: int

    @property
    def digest_size(self) -> int:
        return hashlib.new(self.hash_name).digest_size

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()


SCRAM_MECHANISMS: Final = {
    m.name: m
    for m in (ScramMechanism("SCRAM-SHA-256", "sha256", 1), ScramMechanism("SCRAM-SHA-512", "sha512", 2))
}
"""Kafka's SCRAM mechanisms by SASL name."""


def salted_password(mechanism: ScramMechanism, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802 ``Hi(Normalize(password), salt, i)`` (Kafka does not SASLprep either: UTF-8 as given)."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode(), salt, iterations)


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """A user's salted keys for one mechanism (Kafka's ``ScramCredential``)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def from_salted_password(
        cls, mechanism: ScramMechanism, salted: bytes, salt: bytes, iterations: int
    ) -> ScramCredential:
        client_key = mechanism.hmac(salted, b"Client Key")
        return cls(salt, mechanism.hash(client_key), mechanism.hmac(salted, b"Server Key"), iterations)

    @classmethod
    def from_password(
        cls,
        mechanism: ScramMechanism,
        password: str,
        *,
        iterations: int = MIN_ITERATIONS,
        salt: bytes | None = None,
    ) -> ScramCredential:
        salt = secrets.token_bytes(32) if salt is None else salt
        return cls.from_salted_password(
            mechanism, salted_password(mechanism, password, salt, iterations), salt, iterations
        )

    def to_config(self) -> str:
        """Kafka's ``ScramCredentialUtils.credentialToString`` (the ``/config/users`` value)."""
        b64 = base64.b64encode
        return (
            f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
            f"server_key={b64(self.server_key).decode()},iterations={self.iterations}"
        )

    @classmethod
    def from_config(cls, text: str) -> ScramCredential:
        """Parse :meth:`to_config`'s form; raises ``ValueError`` on anything else."""
        fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        try:
            return cls(
                base64.b64decode(fields["salt"], validate=True),
                base64.b64decode(fields["stored_key"], validate=True),
                base64.b64decode(fields["server_key"], validate=True),
                int(fields["iterations"]),
            )
        except (KeyError, binascii.Error) as exc:
            raise ValueError(f"not a SCRAM credential: {exc}") from None

    def verify_password(self, mechanism: ScramMechanism, password: str) -> bool:
        """Whether ``password`` derives this credential's stored key (PLAIN against a SCRAM credential)."""
        salted = salted_password(mechanism, password, self.salt, self.iterations)
        return hmac.compare_digest(mechanism.hash(mechanism.hmac(salted, b"Client Key")), self.stored_key)


CredentialLookup: TypeAlias = Callable[[str, str], "ScramCredential | None"]
"""``(username, mechanism name) -> credential``, ``None`` for an unknown user or mechanism."""

_SECRET: Final = secrets.token_bytes(32)
"""Per-process key for the stand-in credential of an unknown user."""


def _stand_in(mechanism: ScramMechanism, username: str) -> ScramCredential:
    """A credential no password matches, stable per user name for this process."""
    salt = hmac.new(_SECRET, f"{mechanism.name}\0{username}".encode(), "sha256").digest()
    return ScramCredential(salt, secrets.token_bytes(mechanism.digest_size), b"", MIN_ITERATIONS)


def _decode_saslname(value: str) -> str:
    """RFC 5802 saslname: ``=2C`` is ``,``, ``=3D`` is ``=``, any other ``=`` is malformed."""
    out: list[str] = []
    i = 0
    while i < len(value):
        if value[i] == "=":
            escape = value[i : i + 3]
            if escape == "=2C":
                out.append(",")
            elif escape == "=3D":
                out.append("=")
            else:
                raise ValueError("bad saslname escape")
            i += 3
        else:
            out.append(value[i])
            i += 1
    return "".join(out)


def _encode_saslname(value: str) -> str:
    return value.replace("=", "=3D").replace(",", "=2C")


def _attributes(message: str, expected: str) -> list[tuple[str, str]]:
    """Split ``a=1,b=2`` checking the leading keys are ``expected`` (one letter each), in order."""
    parts = message.split(",")
    pairs: list[tuple[str, str]] = []
    for part in parts:
        if len(part) < 2 or part[1] != "=":
            raise ValueError(f"malformed attribute {part[:8]!r}")
        pairs.append((part[0], part[2:]))
    if len(pairs) < len(expected) or "".join(k for k, _ in pairs[: len(expected)]) != expected:
        raise ValueError("unexpected attributes")
    return pairs


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def _printable_nonce(nonce: str) -> bool:
    return bool(nonce) and all(0x21 <= ord(c) <= 0x7E and c != "," for c in nonce)


class ScramServer:
    """The server side of one SCRAM exchange: :meth:`first` then :meth:`final`, each at most once."""

    def __init__(
        self, mechanism: ScramMechanism, credentials: CredentialLookup, *, server_nonce: str | None = None
    ) -> None:
        self.mechanism = mechanism
        self._server_nonce = server_nonce if server_nonce is not None else secrets.token_urlsafe(24)
        self._credentials = credentials
        self.username: str | None = None
        """Set once the exchange has succeeded."""
        self._state = "first"
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._candidate = ""
        self._credential: ScramCredential | None = None

    @property
    def complete(self) -> bool:
        return self._state == "done"

    def _fail(self) -> SaslAuthenticationError:
        self._state = "failed"
        return SaslAuthenticationError(failure_message(self.mechanism.name))

    def evaluate(self, token: bytes) -> bytes:
        """Consume the client's next message, return ours; raises :class:`SaslAuthenticationError`."""
        try:
            if self._state == "first":
                return self._first(token)
            if self._state == "final":
                return self._final(token)
        except (ValueError, UnicodeDecodeError, binascii.Error):
            raise self._fail() from None
        raise self._fail()

    def _first(self, token: bytes) -> bytes:
        message = token.decode()
        flag, authzid, bare = message.split(",", 2)
        if flag != "n":  # "y" / "p=..." ask for channel binding, which Kafka does not do
            raise ValueError("channel binding is not supported")
        if authzid and not authzid.startswith("a="):
            raise ValueError("malformed authzid")
        pairs = _attributes(bare, "nr")
        if len(pairs) > 2:
            raise ValueError("SCRAM extensions are not supported")
        username = _decode_saslname(pairs[0][1])
        client_nonce = pairs[1][1]
        if not username or not _printable_nonce(client_nonce):
            raise ValueError("empty user or bad nonce")
        if authzid and _decode_saslname(authzid[2:]) != username:
            raise ValueError("authzid differs from the user")
        credential = self._credentials(username, self.mechanism.name)
        self._candidate = username
        self._credential = credential if credential is not None else _stand_in(self.mechanism, username)
        self._gs2_header = f"{flag},{authzid},"
        self._client_first_bare = bare
        self._nonce = client_nonce + self._server_nonce
        self._server_first = (
            f"r={self._nonce},s={_b64(self._credential.salt)},i={self._credential.iterations}"
        )
        self._state = "final"
        return self._server_first.encode()

    def _final(self, token: bytes) -> bytes:
        message = token.decode()
        without_proof, sep, proof_text = message.rpartition(",p=")
        if not sep:
            raise ValueError("no proof")
        pairs = _attributes(without_proof, "cr")
        if len(pairs) > 2:
            raise ValueError("SCRAM extensions are not supported")
        if _unb64(pairs[0][1]) != self._gs2_header.encode():
            raise ValueError("channel binding differs from the client-first header")
        if not hmac.compare_digest(pairs[1][1].encode(), self._nonce.encode()):
            raise ValueError("nonce mismatch")
        credential = self._credential
        assert credential is not None
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        client_signature = self.mechanism.hmac(credential.stored_key, auth_message)
        proof = _unb64(proof_text)
        if len(proof) != len(client_signature):
            raise ValueError("bad proof length")
        client_key = _xor(proof, client_signature)
        if not hmac.compare_digest(self.mechanism.hash(client_key), credential.stored_key):
            raise ValueError("bad proof")
        server_signature = self.mechanism.hmac(credential.server_key, auth_message)
        self.username = self._candidate
        self._state = "done"
        self._credential = None
        return f"v={_b64(server_signature)}".encode()


class ScramClient:
    """The client side of one SCRAM exchange (the CLI and inter-broker connections use it)."""

    def __init__(
        self, mechanism: ScramMechanism, username: str, password: str, *, nonce: str | None = None
    ) -> None:
        self.mechanism = mechanism
        self._password = password
        self._nonce = nonce if nonce is not None else secrets.token_urlsafe(24)
        self._client_first_bare = f"n={_encode_saslname(username)},r={self._nonce}"
        self._server_signature = b""

    def first_message(self) -> bytes:
        return f"n,,{self._client_first_bare}".encode()

    def final_message(self, server_first: bytes) -> bytes:
        """The client-final for ``server_first``; raises :class:`SaslAuthenticationError` if it is bad."""
        try:
            text = server_first.decode()
            pairs = _attributes(text, "rsi")
            nonce, salt, iterations = pairs[0][1], _unb64(pairs[1][1]), int(pairs[2][1])
        except (ValueError, UnicodeDecodeError, binascii.Error):
            raise SaslAuthenticationError("malformed SCRAM server-first message") from None
        if not nonce.startswith(self._nonce) or iterations < MIN_ITERATIONS:
            raise SaslAuthenticationError(
                "SCRAM server-first message has a foreign nonce or too few iterations"
            )
        m = self.mechanism
        salted = salted_password(m, self._password, salt, iterations)
        client_key = m.hmac(salted, b"Client Key")
        without_proof = f"c={_b64(b'n,,')},r={nonce}"
        auth_message = f"{self._client_first_bare},{text},{without_proof}".encode()
        proof = _xor(client_key, m.hmac(m.hash(client_key), auth_message))
        self._server_signature = m.hmac(m.hmac(salted, b"Server Key"), auth_message)
        return f"{without_proof},p={_b64(proof)}".encode()

    def verify_server_final(self, server_final: bytes) -> None:
        """Check the server's signature; raises :class:`SaslAuthenticationError` when it is not the server's."""
        if not hmac.compare_digest(server_final, f"v={_b64(self._server_signature)}".encode()):
            raise SaslAuthenticationError("the SCRAM server signature does not match: not the server we know")
