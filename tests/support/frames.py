"""Request frames for tests that drive a Connection over a fake transport."""

from __future__ import annotations

from tidelog.protocol.codec import encode_request
from tidelog.protocol.messages import ApiKey, DescribeClusterRequest, RequestHeader


def describe_cluster_frame(correlation_id: int) -> bytes:
    """One size-prefixed DescribeCluster v0 request with ``correlation_id``."""
    header = RequestHeader(
        request_api_key=ApiKey.DESCRIBE_CLUSTER,
        request_api_version=0,
        correlation_id=correlation_id,
        client_id="c",
    )
    return encode_request(header, DescribeClusterRequest())
