"""IncrementalAlterConfigs operations (SET, DELETE, APPEND, SUBTRACT) applied to one level's configs.

Invariants: as Kafka's ``ConfigAdminManager``: a request naming a key twice, or an unknown operation, is
refused; APPEND / SUBTRACT apply only to list configs (an item is appended once, subtracted wherever it
is); SET of a null value is refused for the levels that say so (topics). The result is not validated:
the caller validates it as its level's configs before storing anything.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from enum import IntEnum

from .config_def import ConfigDef
from .errors import ConfigError
from .values import ConfigType

__all__ = ["AlterConfigOp", "apply_config_operations", "parse_list"]


class AlterConfigOp(IntEnum):
    """IncrementalAlterConfigs' ``ConfigOperation`` (Kafka's ``AlterConfigOp.OpType``)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


def apply_config_operations(
    current: Mapping[str, str],
    operations: Sequence[tuple[str, AlterConfigOp | int, str | None]],
    *,
    definition_of: Callable[[str], ConfigDef],
    list_base: Callable[[str, Mapping[str, str | None]], tuple[str, ...]],
    null_set: str | None = None,
) -> dict[str, str | None]:
    """IncrementalAlterConfigs ``operations`` applied to a level's ``current`` configs (not validated).

    Duplicate keys and unknown operations are refused as Kafka does; SET of a null value too when
    ``null_set`` names the level ("topic"). APPEND / SUBTRACT apply only to list configs and start from
    ``list_base(name, updated_so_far)``; every other kind of config refuses them.
    """
    names = [name for name, _, _ in operations]
    if len(set(names)) != len(names):
        raise ConfigError("Error due to duplicate config keys")
    updated: dict[str, str | None] = dict(current)
    for name, op_code, value in operations:
        definition = definition_of(name)
        try:
            op = AlterConfigOp(op_code)
        except ValueError:
            raise ConfigError(
                f"Unknown config operation {op_code} for config key: {name}", key=name
            ) from None
        if op is AlterConfigOp.SET:
            if value is None and null_set is not None:
                raise ConfigError(f"Null value not supported for {null_set} configs: {name}", key=name)
            updated[name] = value
        elif op is AlterConfigOp.DELETE:
            updated.pop(name, None)
        else:
            if definition.type is not ConfigType.LIST:
                verb = "append" if op is AlterConfigOp.APPEND else "subtract"
                raise ConfigError(f"Config value {verb} is not allowed for config key: {name}", key=name)
            items = list(list_base(name, updated))
            given = parse_list(definition, value or "")
            if op is AlterConfigOp.APPEND:
                items.extend(item for item in given if item not in items)
            else:
                items = [item for item in items if item not in given]
            updated[name] = ",".join(items)
    return updated


def parse_list(definition: ConfigDef, raw: str) -> tuple[str, ...]:
    """A list config's items (none for a blank value)."""
    value = definition.parse(raw) if raw.strip() else ()
    assert isinstance(value, tuple)
    return value
