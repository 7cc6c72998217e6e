"""The nemesis: faults injected into the system under test at seeded moments.

A :class:`Fault` is anything with a ``name`` and ``inject(target, rng) -> str`` that does its damage and
heals it before returning (the returned text says what it did, for the history). The single-broker
faults here act on a :class:`tidelog.testing.Broker`; a cluster fault (a network partition between
namespaces) is another class with the same two members acting on a :class:`tidelog.testing.Cluster`.

Invariants:

- Every random choice (which fault, when, how long) comes from the ``random.Random`` passed in, so one
  seed replays the same schedule (the clients' timing still varies from run to run).
- A fault leaves the target running when it returns: :class:`Kill9` restarts the broker on the same data
  directory and port, :class:`Pause` continues it (also when the pause itself raised).
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tidelog.testing._broker import Broker

__all__ = ["Fault", "Kill9", "Nemesis", "Pause", "fault_named", "FAULTS"]


class Fault(Protocol):
    @property
    def name(self) -> str: ...

    def inject(self, target: Any, rng: random.Random) -> str:
        """Do the damage and heal it; returns what was done."""
        ...


@dataclass(frozen=True, slots=True)
class Kill9:
    """SIGKILL the broker (no clean shutdown, the page cache survives), wait ``down`` seconds, restart it."""

    down: tuple[float, float] = (0.0, 0.5)
    name: str = "kill9"

    def inject(self, target: Broker, rng: random.Random) -> str:
        down = rng.uniform(*self.down)
        target.kill()
        time.sleep(down)
        target.restart()
        return f"kill -9, down {down:.2f}s, restarted"


@dataclass(frozen=True, slots=True)
class Pause:
    """SIGSTOP the broker for ``seconds``, then SIGCONT (a hung process: sockets open, nothing answers)."""

    seconds: tuple[float, float] = (0.2, 2.0)
    name: str = "pause"

    def inject(self, target: Broker, rng: random.Random) -> str:
        seconds = rng.uniform(*self.seconds)
        with target.paused(seconds=seconds):
            pass
        return f"SIGSTOP {seconds:.2f}s, SIGCONT"


FAULTS: dict[str, Fault] = {"kill9": Kill9(), "pause": Pause()}


def fault_named(name: str) -> Fault:
    try:
        return FAULTS[name]
    except KeyError:
        raise ValueError(f"unknown fault {name!r}; known: {', '.join(FAULTS)}") from None


class Nemesis:
    """``cycles`` faults, each after a quiet spell of ``quiet`` seconds, chosen among ``faults`` by
    ``rng``. :meth:`run` calls ``record(text)`` for each fault (before and after it)."""

    def __init__(
        self,
        faults: Sequence[Fault],
        rng: random.Random,
        *,
        cycles: int,
        quiet: tuple[float, float] = (0.3, 1.5),
    ) -> None:
        if not faults:
            raise ValueError("the nemesis needs at least one fault")
        self.faults = list(faults)
        self.rng = rng
        self.cycles = cycles
        self.quiet = quiet

    def run(self, target: Any, record: Any, stop: Any = None) -> None:
        for cycle in range(self.cycles):
            time.sleep(self.rng.uniform(*self.quiet))
            if stop is not None and stop.is_set():
                return
            fault = self.rng.choice(self.faults)
            record(f"cycle {cycle + 1}: {fault.name} begins")
            record(f"cycle {cycle + 1}: {fault.inject(target, self.rng)}")
