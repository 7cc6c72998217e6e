"""Run a streaming pipeline file without spark-submit: ``tidelog pipeline FILE [options]``, or the same
runner as ``python -m tidelog.spark.pipeline FILE [options]`` (both call :func:`run`).

A pipeline file (see ``examples/``) is plain Python defining::

    def add_arguments(parser: argparse.ArgumentParser) -> None: ...   # optional: its own options
    def build(spark: SparkSession, args: argparse.Namespace) -> DataStreamWriter: ...

``build`` returns the query *unstarted*; this runner owns the rest, the same way for every pipeline:

- Spark starts in-process on ``--master`` (``local[*]`` unless told; any Spark master URL works, e.g.
  ``spark://host:7077``), with ``format("tidelog")`` registered.
- ``--bootstrap-server`` (default ``127.0.0.1:9092``) reaches the pipeline as ``args.bootstrap_server``.
- The checkpoint is ``--checkpoint`` (default ``./checkpoints/<file stem>``): stopping the command and
  starting it again resumes exactly where the checkpoint says.
- ``--available-now`` processes what is in the topics now and exits (``Trigger.AvailableNow``);
  otherwise micro-batches run every ``--trigger-interval`` until Ctrl-C or ``--timeout`` seconds.
- Exit code 0 when the query stopped cleanly, 1 when it failed (the error is printed).
- ``--help`` without a file shows the runner's options; with a file, the pipeline's own options too.
- A missing pipeline file, a file without ``build``, a malformed ``--conf``, or a missing ``spark`` extra
  (pyspark, pyarrow) is a :class:`PipelineError` whose message says what to do (for the extra:
  ``pip install 'tidelog[spark]'``); each entry prints it as one line and exits 1, no traceback.
  pyspark is first imported after the file is found, so help works without the extra.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from tidelog.spark.session import DEFAULT_MASTER, session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.streaming.readwriter import DataStreamWriter

__all__ = [
    "PROG",
    "SPARK_EXTRA",
    "PipelineError",
    "load_pipeline",
    "main",
    "parse_args",
    "require_spark",
    "run",
    "start",
]

PROG = "python -m tidelog.spark.pipeline"
SPARK_EXTRA = "pip install 'tidelog[spark]'"


class PipelineError(RuntimeError):
    """The pipeline cannot start: no such file, no ``build``, a bad option, or no ``spark`` extra."""


def require_spark() -> None:
    """Raise :class:`PipelineError` naming the ``spark`` extra unless pyspark and pyarrow import."""
    try:
        for name in ("pyspark", "pyarrow"):
            importlib.import_module(name)
    except ImportError as exc:
        missing = f"{exc.name} is not installed" if isinstance(exc, ModuleNotFoundError) and exc.name else exc
        raise PipelineError(f"Spark pipelines need the 'spark' extra ({missing}): {SPARK_EXTRA}") from None


def load_pipeline(path: str | Path) -> ModuleType:
    file = Path(path)
    if not file.is_file():
        raise PipelineError(f"no pipeline file {file}")
    require_spark()  # pipeline files import pyspark: say what is missing rather than fail inside one
    spec = importlib.util.spec_from_file_location(f"tidelog_pipeline_{file.stem}", file)
    if spec is None or spec.loader is None:
        raise PipelineError(f"cannot load {file} as Python")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, "build", None)):
        raise PipelineError(f"{file} defines no build(spark, args) function")
    return module


def _common_parser(prog: str, add_help: bool, file_optional: bool = False) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Run a tidelog Spark pipeline file (see examples/).",
        epilog="FILE --help also lists the pipeline's own options.",
        add_help=add_help,
    )
    parser.add_argument(
        "file", nargs="?" if file_optional else None, help="the pipeline file, e.g. examples/transform.py"
    )
    parser.add_argument("--master", default=DEFAULT_MASTER, help="Spark master URL (default: %(default)s)")
    parser.add_argument(
        "--bootstrap-server", default="127.0.0.1:9092", help="tidelog (Kafka) bootstrap servers"
    )
    parser.add_argument("--checkpoint", help="checkpoint directory (default: ./checkpoints/<file stem>)")
    parser.add_argument("--available-now", action="store_true", help="process what is there now, then exit")
    parser.add_argument(
        "--trigger-interval", default="1 second", help="micro-batch interval (default: %(default)s)"
    )
    parser.add_argument("--timeout", type=float, help="stop after this many seconds")
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark configuration (repeatable)"
    )
    return parser


def parse_args(argv: Sequence[str], *, prog: str = PROG) -> tuple[ModuleType, argparse.Namespace]:
    """Load the pipeline named in ``argv`` and parse the common options plus the pipeline's own.

    Without a file in ``argv``, this is argparse's help (``--help``, exit 0) or usage error (exit 2).
    """
    known, _ = _common_parser(prog, add_help=False, file_optional=True).parse_known_args(argv)
    if known.file is None:
        full = _common_parser(prog, add_help=True)
        full.parse_args(argv)  # --help: prints the runner's options and exits 0
        full.error("the following arguments are required: file")
    module = load_pipeline(known.file)
    parser = _common_parser(prog, add_help=True)
    if module.__doc__:
        parser.description = module.__doc__.strip().splitlines()[0]
    add_arguments = getattr(module, "add_arguments", None)
    if callable(add_arguments):
        add_arguments(parser.add_argument_group(Path(known.file).name))
    args = parser.parse_args(argv)
    if args.checkpoint is None:
        args.checkpoint = str(Path("checkpoints") / Path(args.file).stem)
    return module, args


def _conf(pairs: Sequence[str]) -> dict[str, str]:
    conf = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise PipelineError(f"--conf {pair!r}: expected KEY=VALUE")
        conf[key] = value
    return conf


def start(module: ModuleType, args: argparse.Namespace, spark: SparkSession) -> StreamingQuery:
    """Build the pipeline's query and start it with the runner's checkpoint and trigger."""
    writer: DataStreamWriter = module.build(spark, args)  # the contract the module docstring states
    writer = writer.option("checkpointLocation", args.checkpoint)
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=args.trigger_interval)
    query: StreamingQuery = writer.start()
    return query


def run(argv: Sequence[str], *, prog: str = PROG) -> int:
    """The whole runner, for every entry: parse ``argv``, start Spark, run the query until it ends.

    Returns the exit code (0 stopped cleanly, 1 the query failed); raises :class:`PipelineError` when the
    pipeline cannot start, and ``SystemExit`` for ``--help`` and argument errors (argparse's).
    """
    module, args = parse_args(argv, prog=prog)
    spark = session(args.master, app_name=f"tidelog pipeline {Path(args.file).stem}", conf=_conf(args.conf))
    from pyspark.errors import StreamingQueryException

    query = start(module, args, spark)
    try:
        query.awaitTermination(args.timeout)
    except (KeyboardInterrupt, StreamingQueryException):
        pass  # a failure is reported below from query.exception()
    finally:
        if query.isActive:
            query.stop()
    error = query.exception()
    spark.stop()
    if error is not None:
        sys.stderr.write(f"pipeline failed: {error}\n")
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tidelog.spark.pipeline``: :func:`run`, with a :class:`PipelineError` as one line."""
    try:
        return run(list(sys.argv[1:] if argv is None else argv))
    except PipelineError as exc:
        sys.stderr.write(f"{PROG}: error: {exc}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
