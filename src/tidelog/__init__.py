"""tidelog: a Kafka-compatible, durable, partitioned commit log in Python.

Layers (dependencies point down only): ``protocol`` (sans-I/O codec) <- ``storage`` (files)
<- ``coordinator`` / ``replication`` (pure state machines) <- ``server`` (asyncio) <- ``client``
(blocking wire client) <- ``spark``, ``testing``, ``console`` <- ``cli``.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
