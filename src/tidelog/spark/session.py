"""Start Spark without spark-submit: the environment PySpark needs, and a session with ``tidelog`` registered.

Invariants:

- :func:`configure_environment` only fills what is unset: ``PYSPARK_PYTHON`` and
  ``PYSPARK_DRIVER_PYTHON`` become this interpreter (so Spark's Python workers import the same
  tidelog, pyarrow and confluent-kafka), ``JAVA_HOME`` a Java 17 runtime (Debian's
  ``/usr/lib/jvm/java-17-openjdk-*`` first, else the ``java`` on ``PATH``).
- :func:`worker_python_problem` names, for a ``local`` master, a Python that Spark would start its
  workers with (``spark.pyspark.python``, else ``PYSPARK_PYTHON`` when the session began, else
  ``python3`` on ``PATH``) and that cannot import tidelog: a session built by hand in a virtualenv
  that is not activated starts ``/usr/bin/python3``, whose failure otherwise surfaces only as a
  ``ModuleNotFoundError`` deep in Spark's planner worker. Other masters' workers run elsewhere and
  are not checked.
- :func:`session` returns a session on ``master`` (``local[*]`` unless told) with the ``tidelog`` data
  source registered; on a ``local`` master it uses few shuffle partitions (``spark.sql.shuffle.partitions``
  = 2 x cores) unless the caller sets them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DEFAULT_MASTER", "configure_environment", "find_java_home", "session", "worker_python_problem"]

DEFAULT_MASTER = "local[*]"


def find_java_home() -> str | None:
    """A Java 17 home: Debian's package first, else the directory above the ``java`` on PATH."""
    for candidate in sorted(Path("/usr/lib/jvm").glob("java-17-openjdk-*")):
        if (candidate / "bin" / "java").exists():
            return str(candidate)
    java = shutil.which("java")
    if java is None:
        return None
    return str(Path(java).resolve().parent.parent)


def configure_environment() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if "JAVA_HOME" not in os.environ:
        home = find_java_home()
        if home is not None:
            os.environ["JAVA_HOME"] = home


def worker_python_problem(spark: SparkSession) -> str | None:
    """Why ``spark``'s local Python workers could not run tidelog's data source, or None."""
    context = spark.sparkContext
    python = context.getConf().get("spark.pyspark.python") or context.pythonExec or "python3"
    return local_worker_python_problem(context.master or "", python)


def local_worker_python_problem(master: str, python: str) -> str | None:
    """Why Python workers running ``python`` for a Spark on ``master`` could not import tidelog, or None
    (always None for a non-local master, whose workers run elsewhere)."""
    if not master.startswith("local"):
        return None
    found = shutil.which(python)
    if found is None:
        return f"Spark's Python workers would run {python!r}, which is not found"
    if os.path.abspath(found) == os.path.abspath(sys.executable):
        return None
    check = subprocess.run(
        [found, "-c", "import tidelog.spark.source"], capture_output=True, timeout=60, check=False
    )
    if check.returncode == 0:
        return None
    return (
        f"Spark's Python workers would run {found}, which cannot import tidelog (this program runs "
        f"{sys.executable}); set PYSPARK_PYTHON={sys.executable} before the session starts, or start it "
        "with tidelog.spark.session()"
    )


def session(
    master: str = DEFAULT_MASTER, *, app_name: str = "tidelog", conf: Mapping[str, str] | None = None
) -> SparkSession:
    """A SparkSession (created, or the active one) with ``format("tidelog")`` registered."""
    configure_environment()
    from pyspark.sql import SparkSession

    from tidelog.spark import register

    settings = dict(conf or {})
    if master.startswith("local"):
        settings.setdefault("spark.sql.shuffle.partitions", str(2 * (os.cpu_count() or 1)))
    settings.setdefault("spark.ui.showConsoleProgress", "false")
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark
