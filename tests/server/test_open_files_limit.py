"""raise_open_files_limit: a broker started with a low soft RLIMIT_NOFILE raises it to the hard limit."""

from __future__ import annotations

import json
import subprocess
import sys

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
