"""The api_key -> handler table, and the ApiVersions answer derived from it.

Invariants:
- A request reaches a handler only if its (api_key, version) lies in the route's range; ApiVersions
  advertises exactly the routes in this table, so it can never offer a version without a handler.
- Every advertised range lies inside the generated schema's valid versions (checked when a route is added).
- ApiVersions (v0-4) is the dispatcher's own route, answered from this table.
- A handler returns the response body, an awaitable of it (delayed operations), or ``NO_RESPONSE``
  (Produce with acks=0). It never raises for a client's mistake: per-partition errors go in the body;
  an exception escaping a handler is a broker bug and closes only that connection.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import REQUEST_TYPES, ApiKey, ApiVersionsRequest, ApiVersionsResponse
from tidelog.protocol.schema import Response

__all__ = [
    "ANONYMOUS",
    "NO_RESPONSE",
    "Answer",
    "NoResponse",
    "Dispatcher",
    "Handler",
    "KafkaPrincipal",
    "RequestContext",
    "Route",
]

API_VERSIONS_RANGE: Final = (0, 4)


class NoResponse:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NO_RESPONSE"


NO_RESPONSE: Final = NoResponse()
"""Returned by a handler whose request gets no response on the wire (Produce with acks=0)."""


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    """Who sent a request (Kafka's ``KafkaPrincipal``): ``User:ANONYMOUS`` until a listener authenticates."""

    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"


ANONYMOUS: Final = KafkaPrincipal("User", "ANONYMOUS")


@dataclass(slots=True)
class RequestContext:
    """What a handler knows about the request beyond its body.

    ``listener_name`` is the client listener the connection came in on (Kafka's ``RequestContext.
    listenerName``): brokers are described to the client by their endpoint on it. ``None`` for a request
    that came in on no listener (handlers driven in-process), answered as if on the first client listener.
    """

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str
    connection_id: int
    listener_name: str | None = None
    principal: KafkaPrincipal = ANONYMOUS
    request_size: int = 0
    """The request's size on the wire (header and body), which ``producer_byte_rate`` counts."""


Answer: TypeAlias = Response | Awaitable[Response]
"""What a handler answers with: the response, or an awaitable of it (a delayed operation, a parked request)."""

Handler = Callable[[RequestContext, Any], "Answer | NoResponse"]
"""A route's handler; its request parameter is the route's request type (Any here: routes differ)."""


@dataclass(frozen=True, slots=True)
class Route:
    api_key: int
    min_version: int
    max_version: int
    handler: Handler


class Dispatcher:
    """Routes decoded requests to handlers and answers ApiVersions from its own table."""

    def __init__(self, routes: Iterable[Route]) -> None:
        self._routes: dict[int, Route] = {}
        lowest, highest = API_VERSIONS_RANGE
        for route in [Route(ApiKey.API_VERSIONS, lowest, highest, self._handle_api_versions), *routes]:
            request_type = REQUEST_TYPES[route.api_key]
            lowest, highest = request_type.VALID_VERSIONS
            if not lowest <= route.min_version <= route.max_version <= highest:
                raise ValueError(
                    f"route for api key {route.api_key} advertises {route.min_version}-{route.max_version}, "
                    f"outside the schema's {lowest}-{highest}"
                )
            if route.api_key in self._routes:
                raise ValueError(f"two routes for api key {route.api_key}")
            self._routes[route.api_key] = route

    @property
    def routes(self) -> Mapping[int, Route]:
        """The routes by api key (fixed once built)."""
        return self._routes

    def route_for(self, api_key: int, api_version: int) -> Route | None:
        route = self._routes.get(api_key)
        if route is None or not route.min_version <= api_version <= route.max_version:
            return None
        return route

    def supported(self, api_key: int) -> tuple[int, int] | None:
        route = self._routes.get(api_key)
        return None if route is None else (route.min_version, route.max_version)

    def _handle_api_versions(self, ctx: RequestContext, request: ApiVersionsRequest) -> ApiVersionsResponse:
        return self.api_versions()

    def api_versions(self, error_code: ErrorCode = ErrorCode.NONE) -> ApiVersionsResponse:
        """The ApiVersions body: one entry per route, in api key order."""
        keys = [
            ApiVersionsResponse.ApiVersion(
                api_key=r.api_key, min_version=r.min_version, max_version=r.max_version
            )
            for r in sorted(self._routes.values(), key=lambda r: r.api_key)
        ]
        return ApiVersionsResponse(error_code=int(error_code), api_keys=keys, throttle_time_ms=0)
