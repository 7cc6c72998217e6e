"""tidelog.testing: start a real tidelog broker for your own tests (no JVM, no Docker).

::

    import tidelog.testing

    with tidelog.testing.broker({"num.partitions": 3}) as b:
        ...  # any Kafka client with bootstrap.servers=b.bootstrap_servers

With pytest, the plugin (installed with tidelog) provides the ``tidelog_broker`` fixture (one broker per
test), ``tidelog_broker_session`` (one per test session) and ``tidelog_broker_factory`` (several brokers);
override the ``tidelog_broker_config`` fixture to configure them.

For failover tests, :class:`Cluster` (``tidelog.testing.cluster(brokers=3)``, the ``tidelog_cluster``
fixture) runs a throwaway ZooKeeper and N brokers: ``kill(broker_id)``, ``restart``, ``pause``,
``expire_session``, and with ``network=True`` ``cut`` / ``isolate`` / ``heal`` between any two members.
:class:`ZooKeeper` (the ``tidelog_zookeeper`` fixture) runs a real standalone ZooKeeper from Debian's
package; :mod:`tidelog.testing.netns` puts test hosts in network namespaces and cuts and heals the network
between them (root, iproute2, nftables).
"""

from tidelog.testing._broker import Broker, BrokerError, broker
from tidelog.testing._cluster import Cluster, ClusterError, cluster
from tidelog.testing._zookeeper import ZooKeeper, ZooKeeperError, zookeeper

__all__ = [
    "Broker",
    "BrokerError",
    "Cluster",
    "ClusterError",
    "ZooKeeper",
    "ZooKeeperError",
    "broker",
    "cluster",
    "zookeeper",
]
