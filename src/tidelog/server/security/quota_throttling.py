"""Client quotas applied to requests: each route's handler wrapped so that its client's usage is recorded
as the request is answered, the response carries the throttle time, and the connection is muted for it
(Kafka's ``KafkaApis`` with KIP-219).

Invariants:

- Produce records the request's size against ``producer_byte_rate`` when the response is ready (after
  the acks=all wait), and its handler time against ``request_percentage`` unless acks=0; the response's
  ``throttle_time_ms`` is the larger of the two throttles. An acks=0 produce has no response, but a byte
  rate throttle still mutes its connection.
- A consumer's Fetch asks for at most what its ``consumer_byte_rate`` allows in a quota window
  (``quota * (samples - 1) * window``, Kafka's ``getMaxValueInQuotaWindow``), so one fetch can never be
  throttled forever. When the answer is ready its record bytes count against the quota and its handler
  time against ``request_percentage``; a throttled fetch takes its bytes back and is answered with no
  data (Kafka's ``getThrottledResponse``): the client fetches the same offsets again after the throttle.
  Follower fetches are exempt (replication is not a client).
- Every other API records its handler time against ``request_percentage``; a response that has a
  ``throttle_time_ms`` field carries the larger of that throttle and whatever the handler put there
  (CreateTopics, CreatePartitions and DeleteTopics put their ``controller_mutation_rate`` throttle).
  Inter-broker APIs (ControlledShutdown, WriteTxnMarkers) are exempt, as Kafka's cluster actions are.
- Throttling mutes the connection: it reads no further request for ``throttle_time_ms`` after this one
  (``mute(connection_id, ms)``). Every version is answered at once: since KIP-219 (Kafka 2.0) Kafka never
  delays a response; clients on Produce v6+ / Fetch v8+ also hold back on their own, older ones are held
  by the mute alone.
- With no quota of a kind ever set, its recording is skipped: a request then costs one wrapper call and
  two attribute checks. Handler time is the time the handler ran on the event loop (``perf_counter_ns``);
  a delayed operation's wait is not counted.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

from tidelog.protocol.messages import ApiKey, FetchRequest, FetchResponse, ProduceRequest
from tidelog.protocol.schema import Response
from tidelog.server.clock import Clock
from tidelog.server.dispatch import Answer, Handler, NoResponse, RequestContext, Route

from .client_quotas import ClientQuotas

__all__ = ["QuotaEnforcer"]

Mute = Callable[[int, int], None]
"""``mute(connection_id, throttle_time_ms)``: read nothing more from that connection for that long."""

_EXEMPT: Final = frozenset({ApiKey.CONTROLLED_SHUTDOWN, ApiKey.WRITE_TXN_MARKERS})
_MUTATIONS: Final = frozenset({ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.CREATE_PARTITIONS})


def _identity(ctx: RequestContext) -> tuple[str, str]:
    return ctx.principal.name, ctx.client_id or ""


def fetch_response_bytes(response: FetchResponse) -> int:
    """The record bytes a Fetch response carries (what ``consumer_byte_rate`` counts)."""
    total = 0
    for topic in response.responses:
        for partition in topic.partitions:
            records: Any = partition.records
            if records is None:
                continue
            total += len(records) if isinstance(records, bytes | bytearray) else records.nbytes
    return total


class QuotaEnforcer:
    """Wraps routes so that their requests are measured and throttled (see the module invariants)."""

    def __init__(
        self,
        quotas: ClientQuotas,
        clock: Clock,
        mute: Mute,
        *,
        perf_ns: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        self.quotas = quotas
        self._clock = clock
        self._mute = mute
        self._perf_ns = perf_ns

    def wrap(self, routes: list[Route]) -> list[Route]:
        wrapped = []
        for route in routes:
            if route.api_key in _EXEMPT:
                wrapped.append(route)
                continue
            if route.api_key == ApiKey.PRODUCE:
                handler = self._produce(route.handler)
            elif route.api_key == ApiKey.FETCH:
                handler = self._fetch(route.handler)
            else:
                handler = self._other(route.handler, always=route.api_key in _MUTATIONS)
            wrapped.append(Route(route.api_key, route.min_version, route.max_version, handler))
        return wrapped

    # -- every API -------------------------------------------------------------------------------------

    def _other(self, handler: Handler, *, always: bool) -> Handler:
        request_quota = self.quotas.request

        def handle(ctx: RequestContext, request: Any) -> Answer | NoResponse:
            if not (always or request_quota.enabled):
                return handler(ctx, request)
            start = self._perf_ns()
            result = handler(ctx, request)
            elapsed = self._perf_ns() - start
            if isinstance(result, NoResponse):
                self._throttle(ctx, None, self._request_throttle(ctx, elapsed))
                return result
            if isinstance(result, Response):
                return self._answer(ctx, result, elapsed)
            return self._later(result, lambda r: self._answer(ctx, r, elapsed))

        return handle

    def _answer(self, ctx: RequestContext, response: Response, elapsed_ns: int) -> Response:
        self._throttle(ctx, response, self._request_throttle(ctx, elapsed_ns))
        return response

    def _request_throttle(self, ctx: RequestContext, elapsed_ns: int) -> int:
        if not self.quotas.request.enabled:
            return 0
        user, client_id = _identity(ctx)
        return self.quotas.request.record_time_ns(user, client_id, elapsed_ns, self._clock.now_ms())

    def _throttle(self, ctx: RequestContext, response: Response | None, throttle_ms: int) -> int:
        """Put ``throttle_ms`` (or the larger throttle already in the response) in the response and mute."""
        current = getattr(response, "throttle_time_ms", None)
        if isinstance(current, int):
            throttle_ms = max(throttle_ms, current)
            response.throttle_time_ms = throttle_ms  # type: ignore[union-attr]
        if throttle_ms > 0:
            self._mute(ctx.connection_id, throttle_ms)
        return throttle_ms

    @staticmethod
    async def _later(answer: Awaitable[Response], finish: Callable[[Response], Response]) -> Response:
        return finish(await answer)

    # -- Produce ---------------------------------------------------------------------------------------

    def _produce(self, handler: Handler) -> Handler:
        quotas = self.quotas
        produce_quota, request_quota = quotas.produce, quotas.request  # fixed for the quotas' life

        def handle(ctx: RequestContext, request: ProduceRequest) -> Answer | NoResponse:
            if not (produce_quota.enabled or request_quota.enabled):
                return handler(ctx, request)
            start = self._perf_ns()
            result = handler(ctx, request)
            elapsed = self._perf_ns() - start
            if isinstance(result, NoResponse):  # acks=0: bytes count, handler time does not
                self._throttle(ctx, None, self._produce_throttle(ctx))
                return result
            if isinstance(result, Response):
                return self._produce_answer(ctx, result, elapsed)
            return self._later(result, lambda r: self._produce_answer(ctx, r, elapsed))

        return handle

    def _produce_throttle(self, ctx: RequestContext) -> int:
        user, client_id = _identity(ctx)
        return self.quotas.produce.record_and_get_throttle_ms(
            user, client_id, ctx.request_size, self._clock.now_ms()
        )

    def _produce_answer(self, ctx: RequestContext, response: Response, elapsed_ns: int) -> Response:
        throttle = max(self._produce_throttle(ctx), self._request_throttle(ctx, elapsed_ns))
        self._throttle(ctx, response, throttle)
        return response

    # -- Fetch -----------------------------------------------------------------------------------------

    def _fetch(self, handler: Handler) -> Handler:
        quotas = self.quotas

        def handle(ctx: RequestContext, request: FetchRequest) -> Answer | NoResponse:
            if not (quotas.fetch.enabled or quotas.request.enabled):
                return handler(ctx, request)
            replica_id = request.replica_state.replica_id if ctx.api_version >= 15 else request.replica_id
            if replica_id >= 0:
                return handler(ctx, request)
            user, client_id = _identity(ctx)
            window_bytes = quotas.fetch.max_value_in_window(user, client_id)
            if window_bytes is not None and window_bytes < request.max_bytes:
                request.max_bytes = max(int(window_bytes), 1)
                request.min_bytes = min(request.min_bytes, request.max_bytes)
            start = self._perf_ns()
            result = handler(ctx, request)
            elapsed = self._perf_ns() - start
            if isinstance(result, NoResponse):
                return result
            if isinstance(result, Response):
                return self._fetch_answer(ctx, result, elapsed)
            return self._later(result, lambda r: self._fetch_answer(ctx, r, elapsed))

        return handle

    def _fetch_answer(self, ctx: RequestContext, response: Response, elapsed_ns: int) -> Response:
        assert isinstance(response, FetchResponse)
        user, client_id = _identity(ctx)
        now = self._clock.now_ms()
        size = fetch_response_bytes(response)
        request_throttle = self._request_throttle(ctx, elapsed_ns)
        byte_throttle = self.quotas.fetch.record_and_get_throttle_ms(user, client_id, size, now)
        throttle = max(request_throttle, byte_throttle)
        if throttle > 0:
            self.quotas.fetch.unrecord(user, client_id, size, now)
            response = FetchResponse(
                error_code=response.error_code, session_id=response.session_id, responses=[]
            )
        self._throttle(ctx, response, throttle)
        return response
