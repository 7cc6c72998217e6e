"""A ``tidelog.testing.Broker`` subprocess with listeners besides its PLAINTEXT one (SSL, mTLS, SASL_*),
each on a free port, for the security tests.

``TlsBroker(extra_listeners={"SSL": "SSL", "MTLS": "SSL"}, config=...)`` listens on ``PLAINTEXT`` (the port
the ready file names: ``bootstrap_servers``) and on each extra ``NAME`` with the given security protocol;
``address("SSL")`` is ``127.0.0.1:PORT`` of a listener, read from the broker's ``listening on`` log line.
Per-listener settings go in ``config`` as Kafka's ``listener.name.<name>.*`` keys.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from tidelog.testing import Broker

__all__ = ["TlsBroker"]


class TlsBroker(Broker):
    def __init__(
        self, config: Mapping[str, Any], *, extra_listeners: Mapping[str, str], **kwargs: Any
    ) -> None:
        protocols = {"PLAINTEXT": "PLAINTEXT", **extra_listeners}
        super().__init__(
            {
                **config,
                "listener.security.protocol.map": ",".join(f"{n}:{p}" for n, p in protocols.items()),
            },
            **kwargs,
        )
        self.extra_listeners = dict(extra_listeners)

    def command(self, port: int) -> list[str]:
        args = super().command(port)
        plain = f"listeners=PLAINTEXT://{self.host}:{port}"
        extra = "".join(f",{name}://{self.host}:0" for name in self.extra_listeners)
        return [plain + extra if arg == plain else arg for arg in args]

    def address(self, listener: str) -> str:
        """``host:port`` of ``listener`` in the current run (from the log's last ``listening on`` line)."""
        found = re.findall(rf"listening on (\S+):(\d+) for {listener.upper()},", self.log_path.read_text())
        if not found:
            raise LookupError(f"no listener {listener} in the broker log:\n{self.log_tail()}")
        host, port = found[-1]
        return f"{host}:{port}"
