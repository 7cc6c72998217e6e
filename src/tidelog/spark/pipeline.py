"""Run a streaming pipeline file without spark-submit: ``python -m tidelog.spark.pipeline FILE [options]``.

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
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from tidelog.spark.session import DEFAULT_MASTER, session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

__all__ = ["PipelineError", "load_pipeline", "main", "parse_args", "start"]


class PipelineError(RuntimeError):
    """The pipeline file is missing or does not define ``build``."""


def load_pipeline(path: str | Path) -> ModuleType:
    file = Path(path)
    if not file.is_file():
        raise PipelineError(f"no pipeline file {file}")
    spec = importlib.util.spec_from_file_location(f"tidelog_pipeline_{file.stem}", file)
    if spec is None or spec.loader is None:
        raise PipelineError(f"cannot load {file} as Python")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, "build", None)):
        raise PipelineError(f"{file} defines no build(spark, args) function")
    return module


def _common_parser(add_help: bool) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tidelog.spark.pipeline",
        description="Run a tidelog Spark pipeline file (see examples/).",
        add_help=add_help,
    )
    parser.add_argument("file", help="the pipeline file, e.g. examples/transform.py")
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


def parse_args(argv: Sequence[str]) -> tuple[ModuleType, argparse.Namespace]:
    """Load the pipeline named in ``argv`` and parse the common options plus the pipeline's own."""
    known, _ = _common_parser(add_help=False).parse_known_args(argv)
    module = load_pipeline(known.file)
    parser = _common_parser(add_help=True)
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
            raise SystemExit(f"--conf {pair!r}: expected KEY=VALUE")
        conf[key] = value
    return conf


def start(module: ModuleType, args: argparse.Namespace, spark: SparkSession) -> StreamingQuery:
    """Build the pipeline's query and start it with the runner's checkpoint and trigger."""
    writer: Any = module.build(spark, args)
    writer = writer.option("checkpointLocation", args.checkpoint)
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=args.trigger_interval)
    query: StreamingQuery = writer.start()
    return query


def main(argv: Sequence[str] | None = None) -> int:
    module, args = parse_args(list(sys.argv[1:] if argv is None else argv))
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


if __name__ == "__main__":
    sys.exit(main())
