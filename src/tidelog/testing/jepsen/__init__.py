"""A Jepsen-style checker for a single tidelog broker: record a history of every send, acknowledgement
and read by real clients while faults are injected, then report what the broker got wrong.

- :mod:`.history`: the recorded ops (thread-safe, JSON lines);
- :mod:`.analysis`: history + final log -> :class:`Report` (lost, duplicated, out-of-order, unexpected,
  consumer non-monotonic reads and gaps, changed reads, aborted reads, half-visible transactions);
- :mod:`.faults`: the pluggable nemesis (:class:`Kill9`, :class:`Pause`; a cluster adds network cuts);
- :mod:`.workers`: idempotent producers of confluent-kafka, kafka-python and aiokafka, a transactional
  producer, read_uncommitted and read_committed consumers;
- :mod:`.runner`: one run, :func:`run` (``python -m tidelog.testing.jepsen --seed S --cycles N``).
"""

from tidelog.testing.jepsen.analysis import ANOMALIES, FinalPartition, Report, analyse
from tidelog.testing.jepsen.faults import Fault, Kill9, Nemesis, Pause
from tidelog.testing.jepsen.history import History, Op
from tidelog.testing.jepsen.runner import RunConfig, run

__all__ = [
    "ANOMALIES",
    "Fault",
    "FinalPartition",
    "History",
    "Kill9",
    "Nemesis",
    "Op",
    "Pause",
    "Report",
    "RunConfig",
    "analyse",
    "run",
]
