"""How this broker reaches the other brokers of its cluster: the inter-broker listener and each broker's
address on it, for :class:`~tidelog.server.cluster.broker_client.BrokerClient`'s ``endpoint_for``.

Invariants:

- The inter-broker listener is ``inter.broker.listener.name`` when set, else the listener named after
  ``security.inter.broker.protocol`` (Kafka's ``ListenerName.forSecurityProtocol``): every broker of a
  cluster must have it.
- An address is read from the :class:`~tidelog.server.metadata_cache.MetadataCache` at every call (a broker
  that registered again on another port is followed at once); a broker that is not alive, or has no
  endpoint on the listener, has no address (``None``: the client fails the send with
  BrokerNotAvailableError and the caller backs off).
"""

from __future__ import annotations

from collections.abc import Callable

from tidelog.server.config import BrokerConfig
from tidelog.server.metadata_cache import MetadataCache

__all__ = ["Address", "endpoint_resolver", "inter_broker_listener_name"]

Address = tuple[str, int]


def inter_broker_listener_name(config: BrokerConfig) -> str:
    """The listener brokers reach each other on."""
    if config.inter_broker_listener_name:
        return config.inter_broker_listener_name.upper()
    return config.security_inter_broker_protocol.upper()


def endpoint_resolver(metadata: MetadataCache, listener_name: str) -> Callable[[int], Address | None]:
    """``endpoint_for(node_id)``: the (host, port) of a live broker on ``listener_name``, else None."""
    listener = listener_name.upper()

    def endpoint_for(node_id: int) -> Address | None:
        broker = metadata.broker(node_id)
        if broker is None:
            return None
        endpoint = broker.endpoint(listener)
        return None if endpoint is None else (endpoint.host, endpoint.port)

    return endpoint_for
