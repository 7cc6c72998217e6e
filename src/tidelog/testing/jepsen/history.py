"""A Jepsen-style history: every send, acknowledgement, failure, read and transaction outcome of a run.

Invariants:

- Recording is thread-safe and append-only; each :class:`Op` carries the client that did it, the topic,
  partition, offset and value it concerns (None where the client did not know them yet) and the time in
  seconds since the history began (a monotonic clock), so a failure report can say what happened when.
- A value names its sender: ``<client>/<seq>`` (:meth:`History.value`), unique over the whole run, so the
  analysis can tell, from the value alone, who sent it and in which order that client sent it.
- A transaction's values are recorded as sent with ``txn`` set; its outcome (``commit``, ``abort``, or
  ``unknown`` when a fault left the client unable to tell) is one ``txn`` op listing them.
- A history round-trips through JSON lines (:meth:`History.dump` / :meth:`History.load`), so a failed
  run can be analysed again offline.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

__all__ = ["History", "Kind", "Op", "split_value"]

Kind = Literal["send", "ack", "fail", "read", "txn", "fault"]


@dataclass(frozen=True, slots=True)
class Op:
    """One thing a client did or was told.

    ``kind``: ``send`` (before the client library had the value), ``ack`` (acknowledged at ``offset``;
    None when the client was not told one), ``fail`` (the client reported ``error`` for the value;
    ``fatal`` when the producer could not go on), ``read`` (a consumer got ``value`` at ``offset``;
    ``client`` names the consumer), ``txn`` (a transaction's ``outcome``, its values in ``values``),
    ``fault`` (the nemesis; ``error`` says what it did).
    """

    kind: Kind
    client: str
    time: float
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    value: bytes | None = None
    idempotent: bool = True
    txn: str | None = None
    error: str | None = None
    fatal: bool = False
    outcome: str | None = None
    values: tuple[bytes, ...] = ()

    def to_json(self) -> str:
        raw = asdict(self)
        raw["value"] = _b64(self.value)
        raw["values"] = [_b64(v) for v in self.values]
        return json.dumps({k: v for k, v in raw.items() if v is not None and v is not False and v != []})

    @staticmethod
    def from_json(line: str) -> Op:
        raw = json.loads(line)
        raw["value"] = _unb64(raw.get("value"))
        raw["values"] = tuple(v for v in (_unb64(x) for x in raw.get("values", [])) if v is not None)
        return Op(**raw)


def _b64(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(value).decode()


def _unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def split_value(value: bytes) -> tuple[str, int] | None:
    """``(client, seq)`` of a value made by :meth:`History.value`; None for anything else."""
    client, sep, seq = value.rpartition(b"/")
    if not sep or not seq.isdigit():
        return None
    return client.decode(errors="replace"), int(seq)


class History:
    """The ops of one run, in the order they were recorded (thread-safe)."""

    def __init__(self, seed: int, ops: Iterable[Op] = ()) -> None:
        self.seed = seed
        self._lock = threading.Lock()
        self._ops: list[Op] = list(ops)
        self._start = time.monotonic()

    def now(self) -> float:
        return round(time.monotonic() - self._start, 4)

    @staticmethod
    def value(client: str, seq: int) -> bytes:
        return f"{client}/{seq:08d}".encode()

    def _add(self, op: Op) -> None:
        with self._lock:
            self._ops.append(op)

    # ---- recording (any thread) ----

    def send(
        self,
        client: str,
        topic: str,
        partition: int,
        value: bytes,
        *,
        idempotent: bool = True,
        txn: str | None = None,
    ) -> None:
        self._add(Op("send", client, self.now(), topic, partition, None, value, idempotent, txn))

    def ack(self, client: str, topic: str, partition: int, offset: int | None, value: bytes) -> None:
        self._add(
            Op(
                "ack",
                client,
                self.now(),
                topic,
                partition,
                offset if offset is None or offset >= 0 else None,
                value,
            )
        )

    def fail(self, client: str, value: bytes | None, error: str, *, fatal: bool = False) -> None:
        self._add(Op("fail", client, self.now(), value=value, error=error, fatal=fatal))

    def read(self, client: str, topic: str, partition: int, offset: int, value: bytes | None) -> None:
        self._add(Op("read", client, self.now(), topic, partition, offset, value))

    def txn(self, client: str, txn: str, outcome: str, values: Iterable[bytes]) -> None:
        self._add(Op("txn", client, self.now(), txn=txn, outcome=outcome, values=tuple(values)))

    def fault(self, what: str) -> None:
        self._add(Op("fault", "nemesis", self.now(), error=what))

    # ---- reading ----

    @property
    def ops(self) -> list[Op]:
        with self._lock:
            return list(self._ops)

    def __iter__(self) -> Iterator[Op]:
        return iter(self.ops)

    def count(self, kind: Kind) -> int:
        return sum(1 for op in self.ops if op.kind == kind)

    def dump(self, path: Path) -> None:
        """Write the history as JSON lines (the first line holds the seed)."""
        with path.open("w") as out:
            out.write(json.dumps({"seed": self.seed}) + "\n")
            for op in self.ops:
                out.write(op.to_json() + "\n")

    @staticmethod
    def load(path: Path) -> History:
        lines = path.read_text().splitlines()
        seed = int(json.loads(lines[0])["seed"])
        return History(seed, (Op.from_json(line) for line in lines[1:] if line.strip()))
