"""``tidelog pipeline FILE [options]``: run a Spark pipeline file (see examples/) in-process.

This is ``python -m tidelog.spark.pipeline`` under the ``tidelog`` command: both call
:func:`tidelog.spark.pipeline.run`, which owns the options, their parsing and the query's life.

Invariants:
- Everything after ``pipeline`` reaches the runner unparsed (``--help`` included), so the two entries
  take the same options with the same defaults (``--master`` ``local[*]``, ...) and cannot drift apart;
  ``tidelog pipeline FILE --help`` lists the pipeline's own options as well.
- Exit codes are the runner's: 0 the query stopped cleanly, 1 it failed, 2 bad arguments (argparse).
- A pipeline that cannot start (no such file, no ``build``, the ``spark`` extra not installed) is
  ``Error: <message>`` and exit 1, never a traceback; the message for the extra names
  ``pip install 'tidelog[spark]'``. pyspark is imported only when a pipeline file is run.
"""

from __future__ import annotations

import click

from tidelog.cli._common import fail

__all__ = ["pipeline_command"]


@click.command(
    "pipeline",
    context_settings={"ignore_unknown_options": True},
    add_help_option=False,  # --help goes to the runner, which knows the pipeline's own options
    short_help="Run a Spark pipeline file (local[*], or --master URL).",
)
@click.argument("argv", nargs=-1, type=click.UNPROCESSED)
def pipeline_command(argv: tuple[str, ...]) -> None:
    """Run a Spark pipeline file: tidelog pipeline FILE [--master URL] [options] [pipeline options]."""
    from tidelog.spark.pipeline import PipelineError, run

    try:
        code = run(argv, prog="tidelog pipeline")
    except PipelineError as exc:
        fail(str(exc))
    raise SystemExit(code)
