"""Which Python Spark's local workers run, checked before a query fails deep inside Spark."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tidelog.spark import register
from tidelog.spark.session import local_worker_python_problem, worker_python_problem


def test_the_test_session_runs_workers_with_this_interpreter(spark: Any) -> None:
    assert worker_python_problem(spark) is None
    register(spark)  # idempotent, and does not raise


def test_this_interpreter_is_fine() -> None:
    assert local_worker_python_problem("local[2]", sys.executable) is None


def test_an_interpreter_without_tidelog_is_named_with_the_fix(tmp_path: Path) -> None:
    bare = tmp_path / "python-without-tidelog"
    bare.write_text("#!/bin/sh\nexec /usr/bin/env -i /bin/sh -c 'exit 1'\n")
    bare.chmod(0o755)
    problem = local_worker_python_problem("local[*]", str(bare))
    assert problem is not None
    assert f"would run {bare}, which cannot import tidelog" in problem
    assert f"PYSPARK_PYTHON={sys.executable}" in problem


def test_a_missing_interpreter_is_named() -> None:
    assert local_worker_python_problem("local", "no-such-python-here") == (
        "Spark's Python workers would run 'no-such-python-here', which is not found"
    )


@pytest.mark.parametrize("master", ["spark://host:7077", "yarn", "k8s://https://host:443"])
def test_remote_workers_are_not_checked(master: str) -> None:
    assert local_worker_python_problem(master, "no-such-python-here") is None
