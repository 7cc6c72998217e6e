"""ApiVersions (key 18): the versions this broker speaks, straight from the dispatch table."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidelog.protocol.messages import ApiVersionsRequest, ApiVersionsResponse

if TYPE_CHECKING:
    from tidelog.server.broker import Broker
    from tidelog.server.dispatch import RequestContext


def handle_api_versions(
    broker: Broker, ctx: RequestContext, request: ApiVersionsRequest
) -> ApiVersionsResponse:
    return broker.dispatcher.api_versions()
