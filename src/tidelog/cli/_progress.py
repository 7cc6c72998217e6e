"""Progress bars of the long-running commands: rich bars with rate and ETA on stderr, only on a terminal.

Invariants: a bar is drawn on stderr and only when stderr is a terminal (``show_progress``), so stdout
(messages, tables, JSON) is byte for byte the same with or without it; the bar is transient (cleared when
done); with no total it shows a count and a rate without ETA.
"""

from __future__ import annotations

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.text import Text

from ._common import err_console

__all__ = ["progress_bar", "show_progress"]


class _RateColumn(ProgressColumn):
    """Items per second (``1,234 msg/s``)."""

    def __init__(self, unit: str) -> None:
        super().__init__()
        self._unit = unit

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("-" if speed is None else f"{speed:,.0f} {self._unit}/s", style="progress.data.speed")


def show_progress() -> bool:
    """Whether to draw bars: stderr is a terminal."""
    return err_console.is_terminal


def progress_bar(unit: str, *, show: bool | None = None, in_bytes: bool = False) -> Progress:
    """A bar counting ``unit`` (or bytes, with a transfer speed), with rate, elapsed time and ETA."""
    rate: ProgressColumn = TransferSpeedColumn() if in_bytes else _RateColumn(unit)
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%") if in_bytes else MofNCompleteColumn(),
        rate,
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=err_console,
        transient=True,
        disable=not (show_progress() if show is None else show),
    )
