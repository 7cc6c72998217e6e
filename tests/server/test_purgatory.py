"""Timing wheel and delayed-operation purgatory: expiry exactly once, overflow wheels, completion races."""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from typing import Any

import pytest

from tidelog.server.purgatory import DelayedOperation, DelayedOperationPurgatory
from tidelog.server.timing_wheel import Timer, TimerTask

# ---- Timer ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tick_ms", "wheel_size", "delay_ms", "expires_at", "levels"),
    [
        (1, 20, 1, 1, 1),
        (1, 20, 5, 5, 1),
        (1, 20, 19, 19, 1),
        (1, 20, 20, 20, 2),  # first overflow wheel
        (1, 20, 21, 21, 2),
        (1, 20, 399, 399, 2),
        (1, 20, 400, 400, 3),
        (1, 20, 401, 401, 3),
        (1, 20, 8_000, 8_000, 4),
        (1, 20, 86_400_000, 86_400_000, 7),  # one day: 7 wheels, not 86 million ticks
        (1, 2, 1_000_000, 1_000_000, 20),
        (10, 8, 25, 20, 1),  # expiry is tick-granular: floor(25 / 10) * 10
        (10, 8, 80, 80, 2),
        (10, 8, 1_234, 1_230, 3),
    ],
)
def test_single_task_expires_exactly_at_its_tick(
    tick_ms: int, wheel_size: int, delay_ms: int, expires_at: int, levels: int
) -> None:
    timer = Timer(tick_ms=tick_ms, wheel_size=wheel_size, start_ms=0)
    task = TimerTask(delay_ms)
    assert timer.add(task, now_ms=0)
    assert timer.levels == levels
    assert (timer.size, task.is_scheduled) == (1, True)
    next_ms = timer.next_expiration_ms()
    assert next_ms is not None
    assert next_ms <= expires_at
    assert timer.advance_clock(expires_at - 1) == []
    assert timer.advance_clock(expires_at) == [task]
    assert (timer.size, task.is_scheduled, timer.next_expiration_ms()) == (0, False, None)
    assert timer.advance_clock(expires_at + 10 * delay_ms) == []


@pytest.mark.parametrize(("tick_ms", "delay_ms"), [(1, 0), (1, -5), (10, 0), (10, 9)])
def test_task_due_within_the_current_tick_is_not_scheduled(tick_ms: int, delay_ms: int) -> None:
    timer = Timer(tick_ms=tick_ms, start_ms=0)
    task = TimerTask(delay_ms)
    assert not timer.add(task, now_ms=0)
    assert (timer.size, task.is_scheduled, timer.next_expiration_ms()) == (0, False, None)


def test_next_expiration_is_the_earliest_bucket_and_cascades_from_overflow() -> None:
    timer = Timer(tick_ms=1, wheel_size=20, start_ms=1_000)
    far, near = TimerTask(450), TimerTask(7)
    timer.add(far, now_ms=1_000)
    assert timer.next_expiration_ms() == 1_200  # the level-2 bucket [1200, 1600) holding 1450
    timer.add(near, now_ms=1_000)
    assert timer.next_expiration_ms() == 1_007
    assert timer.advance_clock(1_007) == [near]
    assert timer.advance_clock(1_200) == []  # cascades 1450 into a finer wheel
    assert timer.next_expiration_ms() == 1_440
    assert timer.advance_clock(1_440) == []
    assert timer.next_expiration_ms() == 1_450
    assert timer.advance_clock(1_450) == [far]


def test_cancelled_tasks_never_expire() -> None:
    timer = Timer(start_ms=0)
    tasks = [TimerTask(d) for d in (5, 50, 500, 5_000)]
    for task in tasks:
        timer.add(task, now_ms=0)
    tasks[1].cancel()
    tasks[3].cancel()
    tasks[3].cancel()  # idempotent
    assert timer.size == 2
    assert timer.advance_clock(10_000) == [tasks[0], tasks[2]]


def test_re_adding_a_scheduled_task_moves_it() -> None:
    timer = Timer(start_ms=0)
    task = TimerTask(100)
    timer.add(task, now_ms=0)
    task.delay_ms = 300
    timer.add(task, now_ms=0)
    assert timer.size == 1
    assert timer.advance_clock(299) == []
    assert timer.advance_clock(300) == [task]


def test_clock_going_backwards_expires_nothing() -> None:
    timer = Timer(start_ms=1_000)
    task = TimerTask(10)
    timer.add(task, now_ms=1_000)
    assert timer.advance_clock(500) == []
    assert timer.advance_clock(1_010) == [task]


def test_a_big_jump_expires_everything_in_expiration_order() -> None:
    timer = Timer(start_ms=0)
    delays = [3, 86_400_000, 1, 20, 400, 399, 7_999, 8_000, 160_001, 2, 3]
    tasks = [TimerTask(d) for d in delays]
    for task in tasks:
        timer.add(task, now_ms=0)
    expired = timer.advance_clock(10**12)
    assert [t.delay_ms for t in expired] == sorted(delays)
    assert expired[:4] == [tasks[2], tasks[9], tasks[0], tasks[10]]  # ties keep insertion order


@pytest.mark.parametrize(("tick_ms", "wheel_size", "seed"), [(1, 20, 1), (1, 2, 2), (1, 64, 3), (5, 10, 4)])
def test_random_schedule_matches_a_brute_force_model(tick_ms: int, wheel_size: int, seed: int) -> None:
    """Tasks added at moving times, some cancelled; each expires at the first advance past its tick."""
    rng = random.Random(seed)
    timer = Timer(tick_ms=tick_ms, wheel_size=wheel_size, start_ms=0)
    due: dict[TimerTask, int] = {}  # task -> tick-granular expiration
    expired_once: set[TimerTask] = set()
    now = 0
    for _ in range(300):
        for _ in range(rng.randrange(0, 12)):
            task = TimerTask(
                rng.choice([rng.randrange(1, 50), rng.randrange(1, 5_000), rng.randrange(1, 10**7)])
            )
            expiration = now + task.delay_ms
            if timer.add(task, now):
                due[task] = expiration - expiration % tick_ms
            else:
                assert expiration - expiration % tick_ms <= now - now % tick_ms
        if due and rng.random() < 0.2:
            victim = rng.choice(list(due))
            victim.cancel()
            del due[victim]
        now += rng.choice([0, 1, 3, 17, 250, 4_000, 90_000])
        expired = timer.advance_clock(now)
        expected = {task for task, at in due.items() if at <= now}
        assert set(expired) == expected
        assert len(expired) == len(expected)
        assert not expected & expired_once
        expired_once |= expected
        for task in expected:
            del due[task]
        assert timer.size == len(due)
        next_ms = timer.next_expiration_ms()
        if due:
            assert next_ms is not None
            assert now < next_ms <= min(due.values())
        else:
            assert next_ms is None
    timer.advance_clock(now + 10**9)
    assert timer.size == 0


def test_timer_rejects_bad_geometry() -> None:
    with pytest.raises(ValueError, match="tick_ms must be >= 1"):
        Timer(tick_ms=0)
    with pytest.raises(ValueError, match="wheel_size >= 2"):
        Timer(wheel_size=1)


# ---- DelayedOperation / purgatory --------------------------------------------------------------------


@dataclass(eq=False)
class Probe:
    """What an operation waits for, and a log of what happened to operations."""

    ready: set[str] = field(default_factory=set)
    events: list[tuple[str, str]] = field(default_factory=list)


class FakeOp(DelayedOperation):
    __slots__ = ("name", "probe")

    def __init__(self, name: str, delay_ms: int, probe: Probe) -> None:
        super().__init__(delay_ms)
        self.name = name
        self.probe = probe

    def try_complete(self) -> bool:
        if self.name in self.probe.ready:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.probe.events.append((self.name, "complete"))

    def on_expiration(self) -> None:
        self.probe.events.append((self.name, "expire"))

    def __repr__(self) -> str:
        return f"FakeOp({self.name})"


# A scenario is a list of steps, each checked as it runs:
#   ("watch", op, delay_ms, keys, now_ms, returns)   try_complete_else_watch
#   ("ready", op)                                    what op waits for has happened
#   ("check", key, completed)                        check_and_complete(key) == completed
#   ("advance", now_ms, [expired ops])               advance_clock(now_ms)
#   ("cancel", key, [cancelled ops])                 cancel_for_key(key)
#   ("force", op, returns)                           op.force_complete()
SCENARIOS: dict[str, tuple[list[tuple[Any, ...]], list[tuple[str, str]]]] = {
    "completes at once": (
        [("ready", "a"), ("watch", "a", 100, ["k"], 0, True), ("advance", 1_000, [])],
        [("a", "complete")],
    ),
    "completes by a watcher before expiry": (
        [("watch", "a", 100, ["k"], 0, False), ("check", "k", 0), ("ready", "a"), ("check", "k", 1), ("advance", 1_000, [])],
        [("a", "complete")],
    ),
    "expires": (
        [("watch", "a", 100, ["k"], 0, False), ("advance", 99, []), ("advance", 100, ["a"]), ("ready", "a"), ("check", "k", 0)],
        [("a", "complete"), ("a", "expire")],
    ),
    "expiry then a late completion": (
        [("watch", "a", 10, ["k"], 0, False), ("ready", "a"), ("advance", 10, ["a"]), ("check", "k", 0), ("force", "a", False)],
        [("a", "complete"), ("a", "expire")],
    ),
    "completion then the timeout passes": (
        [("watch", "a", 10, ["k"], 0, False), ("force", "a", True), ("force", "a", False), ("advance", 10, []), ("check", "k", 0)],
        [("a", "complete")],
    ),
    "two keys, completed through one": (
        [("watch", "a", 100, ["k1", "k2"], 0, False), ("ready", "a"), ("check", "k1", 1), ("check", "k2", 0), ("advance", 500, [])],
        [("a", "complete")],
    ),
    "zero delay expires immediately": (
        [("watch", "a", 0, ["k"], 5, False), ("advance", 1_000, []), ("check", "k", 0)],
        [("a", "complete"), ("a", "expire")],
    ),
    "long delay through overflow wheels": (
        [("watch", "a", 3_600_000, ["k"], 0, False), ("watch", "b", 50, ["k"], 0, False), ("advance", 50, ["b"]),
         ("advance", 3_599_999, []), ("advance", 3_600_000, ["a"])],
        [("b", "complete"), ("b", "expire"), ("a", "complete"), ("a", "expire")],
    ),
    "only ready ops complete": (
        [("watch", "a", 100, ["k"], 0, False), ("watch", "b", 100, ["k"], 0, False), ("watch", "c", 100, ["k"], 0, False),
         ("ready", "a"), ("ready", "c"), ("check", "k", 2), ("advance", 100, ["b"])],
        [("a", "complete"), ("c", "complete"), ("b", "complete"), ("b", "expire")],
    ),
    "cancel for key": (
        [("watch", "a", 100, ["k"], 0, False), ("watch", "b", 100, ["k"], 0, False), ("ready", "b"), ("check", "k", 1),
         ("watch", "c", 100, ["k"], 0, False), ("cancel", "k", ["a", "c"]), ("advance", 1_000, []), ("check", "k", 0)],
        [("b", "complete")],
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_purgatory_scenarios(name: str) -> None:
    steps, expected_events = SCENARIOS[name]
    probe = Probe()
    purgatory: DelayedOperationPurgatory[str, FakeOp] = DelayedOperationPurgatory("test", start_ms=0)
    ops: dict[str, FakeOp] = {}
    for step in steps:
        kind = step[0]
        if kind == "watch":
            _, op_name, delay_ms, keys, now_ms, returns = step
            ops[op_name] = FakeOp(op_name, delay_ms, probe)
            assert purgatory.try_complete_else_watch(ops[op_name], keys, now_ms) is returns
        elif kind == "ready":
            probe.ready.add(step[1])
        elif kind == "check":
            assert purgatory.check_and_complete(step[1]) == step[2], step
        elif kind == "advance":
            assert [op.name for op in purgatory.advance_clock(step[1])] == step[2], step
        elif kind == "cancel":
            assert [op.name for op in purgatory.cancel_for_key(step[1])] == step[2], step
        elif kind == "force":
            assert ops[step[1]].force_complete() is step[2], step
    assert probe.events == expected_events
    assert purgatory.delayed == 0


def test_completion_is_exactly_once_for_many_operations() -> None:
    rng = random.Random(7)
    probe = Probe()
    purgatory: DelayedOperationPurgatory[int, FakeOp] = DelayedOperationPurgatory("many", purge_interval=100)
    ops = [FakeOp(f"op{i}", rng.randrange(1, 60_000), probe) for i in range(5_000)]
    keys_of = {op.name: rng.sample(range(50), rng.randrange(1, 4)) for op in ops}
    now = 0
    expired: list[FakeOp] = []
    for i, op in enumerate(ops):
        assert not purgatory.try_complete_else_watch(op, keys_of[op.name], now)
        if i % 100 == 0:
            now += 7
            expired.extend(purgatory.advance_clock(now))
    completed_by_watchers = 0
    for op in rng.sample(ops, 2_500):
        probe.ready.add(op.name)
    for key in range(50):
        completed_by_watchers += purgatory.check_and_complete(key)
    while (next_ms := purgatory.next_expiration_ms()) is not None:
        now = max(now, next_ms)
        expired.extend(purgatory.advance_clock(now))
    completions = [name for name, what in probe.events if what == "complete"]
    assert sorted(completions) == sorted(op.name for op in ops)  # every op exactly once
    expirations = {name for name, what in probe.events if what == "expire"}
    assert expirations == {op.name for op in expired}
    assert completed_by_watchers + len(expired) == len(ops)
    assert all(op.is_completed for op in ops)
    assert purgatory.delayed == 0
    for key in range(50):
        assert purgatory.check_and_complete(key) == 0
    assert purgatory.watched == 0
    assert purgatory.watched_keys() == []


def test_completed_operations_lingering_on_other_keys_are_purged() -> None:
    probe = Probe()
    purgatory: DelayedOperationPurgatory[str, FakeOp] = DelayedOperationPurgatory("purge", purge_interval=5)
    ops = [FakeOp(f"op{i}", 10_000, probe) for i in range(10)]
    for op in ops:
        purgatory.try_complete_else_watch(op, ["hot", "cold"], now_ms=0)
    probe.ready.update(op.name for op in ops[:8])
    assert purgatory.check_and_complete("hot") == 8
    assert purgatory.watched == 2 + 10  # the 8 completed still sit on "cold"
    assert len(purgatory.watchers_for("cold")) == 10
    purgatory.advance_clock(1)  # 10 watched-once operations - 2 delayed > purge_interval
    assert purgatory.watched == 4
    assert [op.name for op in purgatory.watchers_for("cold")] == ["op8", "op9"]


def test_callbacks_may_reenter_the_purgatory() -> None:
    probe = Probe()
    purgatory: DelayedOperationPurgatory[str, DelayedOperation] = DelayedOperationPurgatory("reentrant")

    class Chained(FakeOp):
        __slots__ = ()

        def on_complete(self) -> None:
            super().on_complete()
            follow = FakeOp(self.name + "-next", 50, probe)
            purgatory.try_complete_else_watch(follow, ["k"], now_ms=0)
            purgatory.check_and_complete("other")

    first = Chained("a", 100, probe)
    purgatory.try_complete_else_watch(first, ["k"], now_ms=0)
    purgatory.try_complete_else_watch(FakeOp("b", 100, probe), ["other"], now_ms=0)
    probe.ready.update({"a", "b"})
    assert purgatory.check_and_complete("k") == 1
    assert probe.events == [("a", "complete"), ("b", "complete")]
    assert [op.delay_ms for op in purgatory.watchers_for("k")] == [50]
    assert [op.name for op in purgatory.advance_clock(50)] == ["a-next"]  # type: ignore[attr-defined]


def test_a_failing_callback_does_not_stop_other_expirations(caplog: pytest.LogCaptureFixture) -> None:
    probe = Probe()

    class Broken(FakeOp):
        __slots__ = ()

        def on_complete(self) -> None:
            raise RuntimeError("boom")

    purgatory: DelayedOperationPurgatory[str, FakeOp] = DelayedOperationPurgatory("broken")
    purgatory.try_complete_else_watch(FakeOp("a", 10, probe), ["k"], now_ms=0)
    broken = Broken("x", 10, probe)
    purgatory.try_complete_else_watch(broken, ["k"], now_ms=0)
    purgatory.try_complete_else_watch(FakeOp("b", 10, probe), ["k"], now_ms=0)
    with caplog.at_level(logging.ERROR, logger="tidelog.server.purgatory"):
        expired = purgatory.advance_clock(10)
    assert [op.name for op in expired] == ["a", "x", "b"]
    assert probe.events == [("a", "complete"), ("a", "expire"), ("b", "complete"), ("b", "expire")]
    assert broken.is_completed
    assert broken.force_complete() is False
    assert "broken: expiring FakeOp(x) failed" in caplog.text


def test_cancel_all_returns_pending_operations() -> None:
    probe = Probe()
    purgatory: DelayedOperationPurgatory[str, FakeOp] = DelayedOperationPurgatory("shutdown")
    a, b, c = (FakeOp(n, 100, probe) for n in "abc")
    purgatory.try_complete_else_watch(a, ["k1", "k2"], now_ms=0)
    purgatory.try_complete_else_watch(b, ["k2"], now_ms=0)
    purgatory.try_complete_else_watch(c, ["k3"], now_ms=0)
    c.force_complete()
    assert purgatory.cancel_all() == [a, b]
    assert (purgatory.delayed, purgatory.watched, purgatory.next_expiration_ms()) == (0, 0, None)
    assert purgatory.advance_clock(1_000) == []
    assert probe.events == [("c", "complete")]


def test_watch_keys_must_not_be_empty() -> None:
    purgatory: DelayedOperationPurgatory[str, FakeOp] = DelayedOperationPurgatory("empty")
    with pytest.raises(ValueError, match="must not be empty"):
        purgatory.try_complete_else_watch(FakeOp("a", 10, Probe()), [], now_ms=0)


def test_an_expired_operation_leaves_its_watch_lists_at_once() -> None:
    probe = Probe()
    purgatory: DelayedOperationPurgatory[str, FakeOp] = DelayedOperationPurgatory(
        "expiry", purge_interval=1000
    )
    short, long = FakeOp("short", 10, probe), FakeOp("long", 1_000, probe)
    purgatory.try_complete_else_watch(short, ["a", "b"], now_ms=0)
    purgatory.try_complete_else_watch(long, ["b"], now_ms=0)
    assert purgatory.advance_clock(10) == [short]
    assert purgatory.watched_keys() == ["b"]  # "a" watched nothing else: gone, no purge needed
    assert purgatory.watchers_for("b") == [long]
    assert purgatory.advance_clock(1_000) == [long]
    assert (purgatory.watched, purgatory.watched_keys()) == (0, [])
