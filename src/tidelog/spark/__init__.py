"""tidelog.spark: a PySpark data source named ``tidelog`` — Spark's Kafka connector in pure Python.

::

    from tidelog.spark import register, session

    spark = session()                      # local[*] by default; session("spark://host:7077") for a cluster
    register(spark)
    df = (spark.readStream.format("tidelog")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092").option("subscribe", "events").load())

Options and columns are those of Spark's ``format("kafka")``, so a pipeline moves between the two
unchanged. Needs the ``spark`` extra (pyspark, pyarrow) and a Java 17 runtime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidelog.spark.session import configure_environment, session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["configure_environment", "register", "session"]


def register(spark: SparkSession) -> None:
    """Make ``format("tidelog")`` known to ``spark`` (idempotent).

    Raises RuntimeError when ``spark`` runs locally with Python workers that cannot import tidelog
    (see :func:`tidelog.spark.session.worker_python_problem`).
    """
    from tidelog.spark.session import worker_python_problem
    from tidelog.spark.source import TidelogDataSource

    problem = worker_python_problem(spark)
    if problem is not None:
        raise RuntimeError(problem)

    spark.dataSource.register(TidelogDataSource)
