"""``tidelog pipeline``: the Spark pipeline runner under the ``tidelog`` command, run as a user runs it.

No Spark starts here: help, argument errors and a missing ``spark`` extra (simulated by making the
import of pyspark or pyarrow fail in the child process). The one Spark run through ``tidelog pipeline``
is tests/spark/test_examples.py::test_the_readme_command_runs_a_pipeline.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

TIDELOG = str(Path(sys.executable).parent / "tidelog")
TRANSFORM = str(Path(__file__).resolve().parents[2] / "examples" / "transform.py")
RUNNER_OPTIONS = (
    "--master MASTER",
    "--bootstrap-server BOOTSTRAP_SERVER",
    "--checkpoint CHECKPOINT",
    "--available-now",
    "--trigger-interval TRIGGER_INTERVAL",
    "--timeout TIMEOUT",
    "--conf KEY=VALUE",
)
EXTRA_MESSAGE = "Spark pipelines need the 'spark' extra ({} is not installed): pip install 'tidelog[spark]'"


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=60, check=False)


def without(module: str, entry: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``entry`` (``cli`` or ``module``) in a Python where ``import <module>`` fails."""
    start = (
        "from tidelog.cli.main import main; main()"
        if entry == "cli"
        else "import runpy; runpy.run_module('tidelog.spark.pipeline', run_name='__main__', alter_sys=True)"
    )
    code = f"import sys; sys.modules[{module!r}] = None; {start}"
    return run(sys.executable, "-c", code, *args)


def options_section(help_text: str) -> str:
    """The help from ``options:`` on (the usage above it wraps differently for each program name)."""
    return help_text[help_text.index("\noptions:") :]


def test_help_lists_the_runner_options() -> None:
    listed = run(TIDELOG, "--help")
    assert listed.returncode == 0, listed.stderr
    assert "pipeline" in listed.stdout.split()

    result = run(TIDELOG, "pipeline", "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: tidelog pipeline [-h] ")
    for option in RUNNER_OPTIONS:
        assert f"  {option}" in result.stdout, option
    assert "Spark master URL (default: local[*])" in result.stdout
    assert run(TIDELOG, "pipeline", "-h").stdout == result.stdout

    module = run(sys.executable, "-m", "tidelog.spark.pipeline", "--help")
    assert module.returncode == 0, module.stderr
    assert module.stdout.startswith("usage: python -m tidelog.spark.pipeline [-h] ")
    assert options_section(module.stdout) == options_section(result.stdout)  # one parser for both


@pytest.mark.skipif(importlib.util.find_spec("pyspark") is None, reason="needs the spark extra")
def test_help_with_a_file_lists_the_pipeline_options_too() -> None:
    result = run(TIDELOG, "pipeline", TRANSFORM, "--help")
    assert result.returncode == 0, result.stderr
    assert "Consume-transform-produce: read a topic" in result.stdout
    for option in (*RUNNER_OPTIONS, "--source SOURCE", "--sink SINK", "--exactly-once"):
        assert f"  {option}" in result.stdout, option


def test_no_file_is_a_usage_error() -> None:
    result = run(TIDELOG, "pipeline", "--master", "local[1]")
    assert result.returncode == 2
    assert result.stderr.endswith("tidelog pipeline: error: the following arguments are required: file\n")
    assert "Traceback" not in result.stderr


def test_missing_pipeline_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.py"
    result = run(TIDELOG, "pipeline", str(missing), "--source", "a")
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == f"Error: no pipeline file {missing}\n"

    module = run(sys.executable, "-m", "tidelog.spark.pipeline", str(missing))
    assert (module.returncode, module.stdout) == (1, "")
    assert module.stderr == f"python -m tidelog.spark.pipeline: error: no pipeline file {missing}\n"


@pytest.mark.parametrize("module", ["pyspark", "pyarrow"])
def test_missing_spark_extra_names_it(module: str) -> None:
    result = without(module, "cli", "pipeline", TRANSFORM, "--source", "a", "--sink", "b")
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == "Error: " + EXTRA_MESSAGE.format(module) + "\n"


def test_missing_spark_extra_names_it_in_the_module_runner_too() -> None:
    result = without("pyspark", "module", TRANSFORM, "--source", "a", "--sink", "b")
    assert (result.returncode, result.stdout) == (1, "")
    assert (
        result.stderr == "python -m tidelog.spark.pipeline: error: " + EXTRA_MESSAGE.format("pyspark") + "\n"
    )


def test_help_works_without_the_spark_extra() -> None:
    result = without("pyspark", "cli", "pipeline", "--help")
    assert result.returncode == 0, result.stderr
    assert "  --master MASTER" in result.stdout
