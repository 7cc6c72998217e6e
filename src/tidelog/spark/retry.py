"""How the Spark source and sink ride through a broker restarting or a leader or coordinator moving: the one
retry policy of the driver's metadata / list-offsets requests and of the sink's checks when a writer is
built.

Invariants:

- :func:`ride_through` calls ``attempt`` again while it fails with an error ``retriable`` accepts, with
  backoff (``FIRST_BACKOFF_S`` doubling to ``MAX_BACKOFF_S``), for up to ``API_TIMEOUT_S`` (60 s, the
  Java admin client's ``default.api.timeout.ms``, which Spark's connector relies on to ride through a
  failover); a retry is made only when it starts within the window, so the last error is raised no later
  than the window's end plus one attempt. Any other error is raised at once.
- ``attempt`` gets the seconds left in the window, to bound its own waits by it (never below
  ``MIN_ATTEMPT_S``, so a last attempt still has time to be answered).
- :func:`kafka_unreachable` is what librdkafka reports when a broker or coordinator is away for now: a lost
  or refused connection, a timeout, NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE /
  COORDINATOR_LOAD_IN_PROGRESS. Authorization errors and unsupported versions are not in it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException

__all__ = ["API_TIMEOUT_S", "kafka_unreachable", "ride_through"]

log = logging.getLogger("tidelog.spark")

_T = TypeVar("_T")

API_TIMEOUT_S = 60.0
"""How long a request rides through a broker or leader going away: the Java admin client's
``default.api.timeout.ms``."""
FIRST_BACKOFF_S = 0.1
MAX_BACKOFF_S = 1.0
MIN_ATTEMPT_S = 1.0

_KAFKA_UNREACHABLE = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._TIMED_OUT,
        KafkaError._WAIT_COORD,
        KafkaError._NODE_UPDATE,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NETWORK_EXCEPTION,
        KafkaError.BROKER_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    }
)


def kafka_unreachable(exc: BaseException) -> bool:
    """A librdkafka error of a broker or coordinator away for now (see the module's invariants)."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0].code() in _KAFKA_UNREACHABLE
    return False


def ride_through(what: str, attempt: Callable[[float], _T], retriable: Callable[[BaseException], bool]) -> _T:
    """``attempt(seconds_left)``, again while it fails with a ``retriable`` error, for up to
    ``API_TIMEOUT_S`` (see the module's invariants)."""
    deadline = time.monotonic() + API_TIMEOUT_S
    backoff = FIRST_BACKOFF_S
    while True:
        try:
            return attempt(max(MIN_ATTEMPT_S, deadline - time.monotonic()))
        except Exception as exc:
            if not retriable(exc) or time.monotonic() + backoff > deadline:
                raise
            log.info("%s: the broker is away for now (%s); asking again in %.1f s", what, exc, backoff)
            time.sleep(backoff)
            backoff = min(MAX_BACKOFF_S, backoff * 2)
