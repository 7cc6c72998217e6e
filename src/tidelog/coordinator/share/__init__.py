"""Share groups (KIP-932): the pure state of queue-style consumption.

- :mod:`.share_partition`: one share-partition's in-flight window as offset ranges (acquire, acknowledge,
  lock expiry, delivery counts, the record-lock limit).

Nothing here reads a clock or does I/O; time comes in as ``now_ms``.
"""
