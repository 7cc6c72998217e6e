"""``run_broker``: a broker that cannot start says why in one ERROR line naming the file, and returns 1.

In-process (no subprocess, no listener is ever bound): each case damages the data directory so that the
``Broker`` cannot be built, the way a real start-up would meet it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from tidelog.server.config import BrokerConfig
from tidelog.server.main import run_broker


def _config(data_dir: Path, **extra: str) -> BrokerConfig:
    return BrokerConfig.from_mapping(
        {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(data_dir), **extra}
    )


def _other_cluster(data_dir: Path) -> None:
    (data_dir / "meta.properties").write_text("version=1\nnode.id=1\ncluster.id=AAAAAAAAAAAAAAAAAAAAAA\n")


def _garbage_meta(data_dir: Path) -> None:
    (data_dir / "meta.properties").write_bytes(b"\x9e\xff\x00garbage")


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (_other_cluster, "meta.properties: the log dir belongs to cluster AAAAAAAAAAAAAAAAAAAAAA"),
        (_garbage_meta, "meta.properties: 'utf-8' codec can't decode"),
    ],
)
def test_a_broker_that_cannot_start_logs_one_error_naming_the_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: Callable[[Path], None], message: str
) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    damage(data_dir)
    with caplog.at_level(logging.INFO):
        code = run_broker(_config(data_dir, **{"cluster.id": "BBBBBBBBBBBBBBBBBBBBBB"}))
    assert code == 1
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert errors[0].getMessage().startswith("cannot start broker: ")
    assert f"{data_dir}/{message}" in errors[0].getMessage()
    assert errors[0].exc_info is None
