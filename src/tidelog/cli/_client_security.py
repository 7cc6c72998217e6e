"""Client properties files (``--command-config``) as librdkafka takes them.

Invariants: keys pass through unchanged except Java's ``sasl.jaas.config``, whose ``username`` and
``password`` become librdkafka's ``sasl.username`` / ``sasl.password`` (an explicit ``sasl.username`` or
``sasl.password`` in the file wins); Java-only keys librdkafka would reject (``sasl.jaas.config``,
``ssl.endpoint.identification.algorithm`` left empty) are dropped. A problem is a ``ValueError`` whose
message never contains the password.
"""

from __future__ import annotations

from pathlib import Path

from tidelog.server.config.errors import ConfigError
from tidelog.server.config.properties import read_properties_file
from tidelog.server.security.sasl_config import parse_jaas_config

__all__ = ["librdkafka_properties"]


def librdkafka_properties(path: str) -> dict[str, str]:
    try:
        entries = read_properties_file(Path(path))
    except ConfigError as exc:
        raise ValueError(str(exc)) from None
    props = {entry.key: entry.value.strip() for entry in entries}
    jaas = props.pop("sasl.jaas.config", None)
    if jaas is not None:
        try:
            login = parse_jaas_config("sasl.jaas.config", jaas)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        for option, key in (("username", "sasl.username"), ("password", "sasl.password")):
            if option in login.options:
                props.setdefault(key, login.options[option])
    if props.get("ssl.endpoint.identification.algorithm") == "":
        del props["ssl.endpoint.identification.algorithm"]
    return props
