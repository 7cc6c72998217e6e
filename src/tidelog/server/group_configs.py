"""Group configs as Kafka 4 keeps them (``kafka-configs --entity-type groups``): per-group overrides of the
broker's ``group.*`` configs, set by AlterConfigs / IncrementalAlterConfigs on GROUP resources and read by
the coordinators through :meth:`GroupConfigStore.configs_of`.

Invariants:

- A group's overrides live in an entity store of entity_configs.py, kind :data:`GROUPS`: on a single node
  the checksummed file ``<first log dir>/tidelog-group-configs.json`` (written whole to a temp file,
  fsynced, renamed), in a cluster the znode ``/config/groups/<group>`` plus a change notification, so every
  broker's cache follows (the metadata watcher hands ``groups/...`` notifications to :meth:`reload`).
  Group ids are sanitized in paths as Kafka sanitizes user names (``a/b`` is ``groups/a%2Fb``).
- Nothing is stored that group_config.py's validation refuses; a refused or ``validate_only`` alteration
  stores nothing. An alteration returns after it is durable, and :meth:`configs_of` shows it from then on.
- :meth:`configs_of` returns exactly the keys set for the group (no defaults), as strings; it is a dict
  lookup, cheap enough for every heartbeat or fetch.
- A damaged file stops the broker at start with a message naming it (entity_configs.py): starting on the
  defaults would silently change every group's lock durations and dead-letter topics.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Final

from tidelog.server.config import (
    GROUP_CONFIGS,
    AlterConfigOp,
    BrokerConfig,
    ConfigDef,
    ConfigEntry,
    ConfigError,
    ConfigType,
    apply_config_operations,
    describe_group_configs,
    validate_group_configs,
)
from tidelog.server.entity_configs import (
    EntityConfigs,
    EntityConfigsError,
    EntityKind,
    FileEntityConfigs,
    ZkEntityConfigs,
    desanitize,
    sanitize,
)
from tidelog.server.zk.client import KafkaZkClient

__all__ = ["FILE_NAME", "GROUPS", "GroupConfigStore", "group_path", "parse_group_path"]

FILE_NAME: Final = "tidelog-group-configs.json"


def group_path(group_id: str) -> str:
    """The entity path of a group: ``groups/<sanitized group id>`` (its znode is ``/config/<path>``)."""
    return f"groups/{sanitize(group_id)}"


def parse_group_path(path: str) -> str:
    """The group id of a group entity path; raises :class:`EntityConfigsError` for anything else."""
    kind, _, name = path.partition("/")
    if kind != "groups" or not name or "/" in name:
        raise EntityConfigsError(f"{path!r} is not a group entity path")
    return desanitize(name)


GROUPS: Final = EntityKind(
    description="the group configs",
    file_name=FILE_NAME,
    check_path=parse_group_path,
    zk_types=("groups",),
    without="to start with every group on the broker's group.* defaults",
)
"""Group entities (``/config/groups/<group>``)."""


def _definition(name: str) -> ConfigDef:
    """What IncrementalAlterConfigs needs of a key (its type); an unknown key passes here as a string and
    is refused by the validation that follows (a DELETE of it changes nothing, as in Kafka)."""
    known = GROUP_CONFIGS.get(name)
    return ConfigDef(name, known.type if known is not None else ConfigType.STRING, None, "")


def _no_list(name: str, _updated: Mapping[str, str | None]) -> tuple[str, ...]:  # pragma: no cover
    raise ConfigError(f"Config value append is not allowed for config key: {name}", key=name)


class GroupConfigStore:
    """Every group's config overrides, validated against the broker's effective config."""

    def __init__(self, entities: EntityConfigs, broker_config: Callable[[], BrokerConfig]) -> None:
        self._entities = entities
        self._broker_config = broker_config

    @classmethod
    def on_disk(cls, directory: Path, broker_config: Callable[[], BrokerConfig]) -> GroupConfigStore:
        """A single node's store (raises :class:`EntityConfigsError` if its file is damaged)."""
        return cls(FileEntityConfigs(directory, GROUPS), broker_config)

    @classmethod
    def in_zookeeper(cls, zk: KafkaZkClient, broker_config: Callable[[], BrokerConfig]) -> GroupConfigStore:
        """A cluster's store; :meth:`load` it before serving and feed it change notifications (:meth:`reload`)."""
        return cls(ZkEntityConfigs(zk, GROUPS), broker_config)

    # -- reading -----------------------------------------------------------------------------------------

    def configs_of(self, group_id: str) -> Mapping[str, str]:
        """The keys explicitly set for ``group_id`` (empty when none): what the coordinators override the
        broker's ``group.*`` defaults with."""
        return self._entities.get(group_path(group_id))

    def all(self) -> Mapping[str, Mapping[str, str]]:
        """Every group with at least one override, by group id."""
        return {parse_group_path(path): configs for path, configs in self._entities.all().items()}

    def describe(
        self,
        group_id: str,
        names: Iterable[str] | None = None,
        *,
        include_synonyms: bool = False,
        include_documentation: bool = False,
    ) -> list[ConfigEntry]:
        """DescribeConfigs' entries for the group (every key, overridden or the broker's value)."""
        return describe_group_configs(
            self._broker_config(),
            self.configs_of(group_id),
            names,
            include_synonyms=include_synonyms,
            include_documentation=include_documentation,
        )

    def subscribe(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(group_id)`` after every change of a group's configs (here or, in a cluster, on
        another broker)."""
        self._entities.subscribe(lambda path: listener(parse_group_path(path)))

    # -- altering ----------------------------------------------------------------------------------------

    async def replace(
        self, group_id: str, configs: Mapping[str, str | None], *, validate_only: bool = False
    ) -> None:
        """AlterConfigs: the group's overrides become exactly ``configs`` (validated whole first)."""
        nulls = sorted(name for name, value in configs.items() if value is None)
        if nulls:
            raise ConfigError(f"Null value not supported for group configs: {','.join(nulls)}", key=nulls[0])
        given = {name: value for name, value in configs.items() if value is not None}
        await self._store(group_id, validate_group_configs(given, self._broker_config()), validate_only)

    async def incremental_alter(
        self,
        group_id: str,
        operations: Sequence[tuple[str, AlterConfigOp | int, str | None]],
        *,
        validate_only: bool = False,
    ) -> None:
        """IncrementalAlterConfigs: SET / DELETE keys of the group's overrides (APPEND / SUBTRACT are refused:
        no group config is a list); the result is validated whole before anything is stored."""
        updated = apply_config_operations(
            self.configs_of(group_id),
            operations,
            definition_of=_definition,
            list_base=_no_list,
            null_set="group",
        )
        complete = {name: value for name, value in updated.items() if value is not None}
        await self._store(group_id, validate_group_configs(complete, self._broker_config()), validate_only)

    async def _store(self, group_id: str, configs: Mapping[str, str], validate_only: bool) -> None:
        if validate_only:
            return
        current = self.configs_of(group_id)
        removed: Collection[str] = [name for name in current if name not in configs]
        await self._entities.alter(group_path(group_id), configs, removed)

    # -- cluster -----------------------------------------------------------------------------------------

    async def load(self) -> None:
        """Read every group's overrides from ZooKeeper (a no-op on a single node)."""
        if isinstance(self._entities, ZkEntityConfigs):
            await self._entities.load()

    async def reload(self, path: str) -> None:
        """A change notification named ``path``: read it again if it is a group's (a no-op otherwise)."""
        if isinstance(self._entities, ZkEntityConfigs):
            await self._entities.reload(path)
