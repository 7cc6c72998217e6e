"""Answers that are a response or an awaitable of one: transform them without caring which.

Invariant: :func:`then` applies its function exactly once, to the response, whether it is at hand or comes
later (a parked request, a cluster write awaiting its commit), and checks the response's type first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from tidelog.protocol.schema import Response
from tidelog.server.dispatch import Answer

__all__ = ["then"]

R = TypeVar("R", bound=Response)


def then(answer: Answer, kind: type[R], merge: Callable[[R], Response]) -> Answer:
    """Apply ``merge`` to an answer (a ``kind`` response) that may be a future (in a cluster, when the
    coordinator's records wait for their commit)."""

    def checked(response: Response) -> Response:
        if not isinstance(response, kind):
            raise TypeError(f"expected a {kind.__name__}, got a {type(response).__name__}")
        return merge(response)

    if isinstance(answer, Response):
        return checked(answer)

    async def merged() -> Response:
        return checked(await answer)

    return merged()
