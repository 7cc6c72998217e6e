"""tidelog.testing: start a real tidelog broker for your own tests (no JVM, no Docker).

::

    import tidelog.testing

    with tidelog.testing.broker({"num.partitions": 3}) as b:
        ...  # any Kafka client with bootstrap.servers=b.bootstrap_servers

With pytest, the plugin (installed with tidelog) provides the ``tidelog_broker`` fixture (one broker per
test), ``tidelog_broker_session`` (one per test session) and ``tidelog_broker_factory`` (several brokers);
override the ``tidelog_broker_config`` fixture to configure them.
"""

from tidelog.testing._broker import Broker, BrokerError, broker

__all__ = ["Broker", "BrokerError", "broker"]
