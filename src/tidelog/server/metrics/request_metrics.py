"""Per-API request counts, error counts and latency parts, recorded by connections on the hot path.

Invariants:
- Recording is a few dict and deque operations per request (never per record); quantiles are computed
  only when scraped, from the last :data:`RESERVOIR_SIZE` samples of each (api, part), as Kafka's
  histograms are (a bounded reservoir).
- Latency parts follow Kafka's ``RequestChannel``: queue (frame read until its handler starts, i.e. decode),
  local (the handler's synchronous work), remote (waiting for a delayed operation: acks=all, long polls,
  parked group requests), response send (until the transport took the bytes); total is their sum.
- Errors are counted per (api, error name) from every response's error codes, NONE included (Kafka's
  ``ErrorsPerSec``): top-level and per partition, never per record.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Final

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import REQUEST_TYPES
from tidelog.protocol.schema import Struct

from .samples import QUANTILES, RESERVOIR_SIZE, Samples

__all__ = ["LATENCY_PARTS", "QUANTILES", "RESERVOIR_SIZE", "RequestMetrics", "api_name", "error_counts"]

LATENCY_PARTS: Final = (
    "totaltimems",
    "requestqueuetimems",
    "localtimems",
    "remotetimems",
    "responsesendtimems",
)
"""The ``kafka_network_requestmetrics_*`` latency names, in the order :meth:`RequestMetrics.observe` takes."""

_API_NAMES: Final = {key: cls.NAME.removesuffix("Request") for key, cls in REQUEST_TYPES.items()}


def api_name(api_key: int) -> str:
    """Kafka's request name for ``api_key`` (``Produce``, ``Fetch``, ``OffsetCommit``...)."""
    return _API_NAMES.get(api_key, str(api_key))


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


_Counter = Callable[[Any, dict[int, int]], None]
_COUNTERS: dict[type, _Counter] = {}


def _no_errors(_value: Any, _counts: dict[int, int]) -> None:
    return None


def _counter(cls: type[Struct], top: type[Struct]) -> _Counter:
    """A function adding the error codes of one ``cls`` value (and the structs in it) to a dict; fields that
    cannot hold an error code (no ``error_code`` below them) are not visited."""
    counter = _COUNTERS.get(cls)
    if counter is not None:
        return counter
    _COUNTERS[cls] = _no_errors  # a recursive struct is not walked twice
    has_error = any(spec.name == "error_code" for spec in cls.FIELDS)
    nested: list[tuple[str, bool, _Counter]] = []
    for spec in cls.FIELDS:
        if spec.is_struct and spec.element_type != "records":
            child = getattr(top, spec.element_type, None)
            if isinstance(child, type) and issubclass(child, Struct):
                child_counter = _counter(child, top)
                if child_counter is not _no_errors:
                    nested.append((spec.name, spec.is_array, child_counter))
    if not has_error and not nested:
        return _no_errors
    fields = tuple(nested)

    def count(value: Any, counts: dict[int, int]) -> None:
        if has_error:
            code = value.error_code
            counts[code] = counts.get(code, 0) + 1
        for name, is_array, child_counter in fields:
            item = getattr(value, name)
            if item is None:
                continue
            if is_array:
                for element in item:
                    child_counter(element, counts)
            else:
                child_counter(item, counts)

    _COUNTERS[cls] = count
    return count


def error_counts(response: object, counts: dict[int, int]) -> None:
    """Add every ``error_code`` of ``response`` (its structs and arrays of structs) to ``counts``."""
    if isinstance(response, Struct):
        cls = type(response)
        counter = _COUNTERS.get(cls) or _counter(cls, cls)
        counter(response, counts)


class RequestMetrics:
    """The broker's request counters (one instance, shared by every connection)."""

    def __init__(self) -> None:
        self.requests: dict[tuple[int, int], int] = {}
        """(api key, version) -> requests handled."""
        self.errors: dict[tuple[int, int], int] = {}
        """(api key, error code) -> responses' error codes seen."""
        self._latency: dict[int, tuple[Samples, ...]] = {}

    def observe(
        self,
        api_key: int,
        api_version: int,
        queue_ms: float,
        local_ms: float,
        remote_ms: float,
        send_ms: float,
    ) -> None:
        """One request answered (or, for acks=0 Produce, handled) with these latency parts."""
        key = (api_key, api_version)
        self.requests[key] = self.requests.get(key, 0) + 1
        parts = self._latency.get(api_key)
        if parts is None:
            parts = self._latency[api_key] = tuple(Samples() for _ in LATENCY_PARTS)
        parts[0].add(queue_ms + local_ms + remote_ms + send_ms)
        parts[1].add(queue_ms)
        parts[2].add(local_ms)
        parts[3].add(remote_ms)
        parts[4].add(send_ms)

    def responded(self, api_key: int, response: object) -> None:
        """Count the error codes of one response."""
        counts: dict[int, int] = {}
        error_counts(response, counts)
        errors = self.errors
        for code, n in counts.items():
            key = (api_key, code)
            errors[key] = errors.get(key, 0) + n

    def latency(self) -> Iterator[tuple[str, str, Samples]]:
        """(metric name, request name, samples) of every part of every API seen."""
        for api_key, parts in sorted(self._latency.items()):
            request = api_name(api_key)
            for name, samples in zip(LATENCY_PARTS, parts, strict=True):
                yield name, request, samples

    def error_names(self) -> Iterator[tuple[str, str, int]]:
        """(request name, error name, count)."""
        for (api_key, code), n in sorted(self.errors.items()):
            yield api_name(api_key), _error_name(code), n
