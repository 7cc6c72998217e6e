"""Share groups (KIP-932): the pure state of queue-style consumption.

- :mod:`.share_partition`: one share-partition's in-flight window as offset ranges (acquire, acknowledge,
  lock expiry, delivery counts, the record-lock limit, release backoff, records waiting for a delivery time).
- :mod:`.share_group`: a share group's members, epochs and server-side assignment (every member gets every
  partition of its topics).
- :mod:`.config`: the settings a share group runs with (its group configs over the broker's defaults).
- :mod:`.delivery_time`: tidelog's delayed delivery headers.
- :mod:`.delayed_offsets`: the records of a window waiting for their delivery time (a bit and a heap entry
  each).
- :mod:`.dead_letter`: KIP-1191's dead-letter copies (records, context headers, partition, crash recovery).
- :mod:`.state_coordinator`: the share coordinator over ``__share_group_state`` (ShareSnapshot records).

Nothing here reads a clock or does I/O; time comes in as ``now_ms``.
"""
