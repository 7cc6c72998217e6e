"""The one exception the coordinator raises to turn a request down with a Kafka error code.

Invariant: a :class:`CoordinatorError` never escapes the coordinator package; each handler catches it
at the scope Kafka answers at (the whole request, one group, one member, one partition) and puts
``error_code`` into the response there.
"""

from __future__ import annotations

from tidelog.protocol.errors import ErrorCode, KafkaProtocolError

__all__ = ["CoordinatorError"]


class CoordinatorError(KafkaProtocolError):
    """A request (or one part of it) is refused with ``error_code``."""

    def __init__(self, error_code: ErrorCode, message: str = "") -> None:
        super().__init__(message or error_code.name, error_code)
