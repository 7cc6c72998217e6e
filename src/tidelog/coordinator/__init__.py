"""Coordinators: pure state machines over Kafka's internal topics. Nothing here does I/O or reads a clock.

Requests and time (``now_ms``) go in; a response, records to append, timers to set (and, for
transactions, markers to write) come out. Durable state changes only by replaying records: live, as a
coordinator emits them, and when the server runtime loads a partition of its internal topic.

- :mod:`tidelog.coordinator.common`: what every coordinator shares: the record type and its framing
  errors, ``partition_for`` (Kafka's ``hash(key) % partitions``), the result and timer types.
- :mod:`tidelog.coordinator.group`: the group coordinator over ``__consumer_offsets``: classic groups
  (JoinGroup/SyncGroup), KIP-848 consumer groups (ConsumerGroupHeartbeat), committed offsets.
- :mod:`tidelog.coordinator.txn`: the transaction coordinator over ``__transaction_state``.

Invariant: ``group`` and ``txn`` import ``common`` (and ``protocol``), never each other; ``common``
imports neither. Nothing here imports ``storage`` or ``server``.
"""
