"""raise_open_files_limit: a broker started with a low soft RLIMIT_NOFILE raises it to the hard limit; and
``log.max.open.segments`` derived from that limit and ``vm.max_map_count`` when unset."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tidelog.server.open_files_limit import default_max_open_segments, max_map_count

SCRIPT = """
import json, resource
from tidelog.server.open_files_limit import raise_open_files_limit
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
print(json.dumps([raise_open_files_limit(), resource.getrlimit(resource.RLIMIT_NOFILE), hard]))
"""


def test_the_soft_limit_is_raised_to_the_hard_limit() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True).stdout
    reported, now, hard = json.loads(out)
    assert reported == [hard, hard]
    assert now == [hard, hard]


def test_segments_get_half_the_descriptors_and_half_the_maps() -> None:
    assert default_max_open_segments(20_000, 65_530) == 2_500  # 10,000 descriptors at four a segment
    assert default_max_open_segments(1 << 20, 65_530) == 16_382  # 32,765 maps at two a segment
    assert default_max_open_segments(1_024, 65_530) == 128
    assert default_max_open_segments(4, 1) == 1


BROKER_SCRIPT = """
import json, resource, sys
from tidelog.server.broker import Broker
from tidelog.server.config import load_broker_config
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
props = {"log.dirs": sys.argv[1]}
if len(sys.argv) > 2:
    props["log.max.open.segments"] = sys.argv[2]
config, _warnings = load_broker_config(None, props)
broker = Broker(config)
print(json.dumps([broker.logs.max_open_segments, resource.getrlimit(resource.RLIMIT_NOFILE)[0], hard]))
broker.logs.close()
"""


def test_an_unset_bound_follows_the_raised_limit_and_the_map_count(tmp_path: Path) -> None:
    """A broker started from a shell with a soft limit of 256 raises it before its logs load and sizes
    ``log.max.open.segments`` from the raised limit, not from 256 (nor the old fixed 1,000)."""
    argv = [sys.executable, "-c", BROKER_SCRIPT, str(tmp_path / "data")]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    bound, soft, hard = json.loads(out)
    assert soft == hard
    assert bound == default_max_open_segments(hard, max_map_count())


def test_an_explicit_bound_is_honoured_and_the_limit_still_raised(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", BROKER_SCRIPT, str(tmp_path / "data"), "7"]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    bound, soft, hard = json.loads(out)
    assert (bound, soft) == (7, hard)
