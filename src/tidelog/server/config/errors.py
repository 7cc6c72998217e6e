"""ConfigError: a configuration value (or name) is not acceptable.

Invariants: every refusal of a config, wherever it is checked (a ``server.properties`` line, ``--set``, a
CreateTopics or AlterConfigs request), is a :class:`ConfigError` whose ``key`` is the key to blame and
whose message names it, in Kafka's ``ConfigException`` wording where Kafka has one
(:func:`invalid_value`). It carries ``INVALID_CONFIG``, so a handler can answer with it directly.
"""

from __future__ import annotations

from tidelog.protocol.errors import ErrorCode, KafkaProtocolError

__all__ = ["ConfigError", "invalid_value", "located"]


class ConfigError(KafkaProtocolError):
    """A configuration value (or name) is not acceptable; the message names the key.

    Carries ``INVALID_CONFIG`` so CreateTopics / AlterConfigs handlers can answer with it directly.
    """

    error_code = ErrorCode.INVALID_CONFIG

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


def invalid_value(name: str, raw: object, problem: str) -> ConfigError:
    """Kafka's ``ConfigException(name, value, message)`` wording."""
    return ConfigError(f"Invalid value {raw} for configuration {name}: {problem}", key=name)


def located(exc: ConfigError, where: str) -> ConfigError:
    """``exc`` with where the value was set (``server.properties:12``, ``--set``) appended."""
    return ConfigError(f"{exc} ({where})", key=exc.key)
