"""The typed error of an admin operation: a Kafka error code and a message naming the problem, which the
handler puts in the topic's (or resource's) result."""

from __future__ import annotations

from tidelog.protocol.errors import ErrorCode

__all__ = ["AdminError"]


class AdminError(Exception):
    """An admin operation that cannot be done (nothing was changed)."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message
