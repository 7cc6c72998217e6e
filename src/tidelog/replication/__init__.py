"""Replication: the pure state of partition replicas and the rules that move it (Kafka's ``Partition``,
``Replica`` and the controller's election algorithms).

Invariants: nothing here does I/O beyond the partition logs of ``storage``, reads a clock or imports
asyncio; times come in as ``now_ms``. The server (ZooKeeper, sockets, the replica fetcher) drives these
objects and carries out what they decide.
"""
