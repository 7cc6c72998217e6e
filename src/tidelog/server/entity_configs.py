"""User and client-id entity configs: Kafka's ``/config/users`` and ``/config/clients`` (client quotas, SCRAM
credentials), on a single node and in a cluster.

An entity is named by its path, as Kafka's config change notifications name it: ``users/<user>``,
``clients/<client-id>``, ``users/<user>/clients/<client-id>``, with ``<default>`` for a default entity
(``users/<default>``, ``users/<default>/clients/<default>``, ``users/alice/clients/<default>``) and every
other name sanitized as Kafka's ``Sanitizer`` does (URL-encoding, so a ``/`` in a user name cannot split a
path). :func:`entity_path` builds one, :func:`parse_entity_path` takes one apart.

Invariants:

- An entity's configs are a map of string keys to string values. Each owner reads and writes only its own
  keys (quotas: ``producer_byte_rate``...; SCRAM: ``SCRAM-SHA-256``...) through :meth:`EntityConfigs.alter`,
  which sets and deletes keys and keeps the others: two owners never overwrite each other's keys.
- An entity left with no keys disappears from :meth:`EntityConfigs.all`.
- :meth:`EntityConfigs.alter` returns only after the change is durable: on a single node the whole store
  has been written to ``<first log dir>/tidelog-entity-configs.json`` (temp file, fsync, rename, directory
  fsync; mode 0600, since it holds SCRAM credentials) and is then visible; in a cluster the znode
  ``/config/<entity path>`` has been written and a change notification created, so every broker reloads it.
- The file carries a CRC32C of its entities. A file that cannot be read whole (not JSON, a wrong shape, a
  checksum that does not match, an unknown format version) raises :class:`EntityConfigsError` naming the
  file: it may hold credentials and quotas, and starting without them would let anyone past a quota (and
  lock out every SCRAM user), so the broker refuses to start until it is restored or removed.
- Subscribers are called with the entity path after every change this broker makes or learns of from
  ZooKeeper (:meth:`ZkEntityConfigs.reload`), after the new configs are visible.
- Nothing here reads the wall clock; the ZooKeeper store is driven by the broker's event loop.
- The same stores hold other kinds of entity (an :class:`EntityKind`: which paths, which file, which
  ``/config`` children): group configs (``groups/<group>``, group_configs.py) are a second store of this
  module's classes with its own file and znodes, never mixed with the user and client entities.
"""

from __future__ import annotations

import json
import urllib.parse
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from tidelog.server.json_checksum import json_crc32c
from tidelog.server.zk.client import KafkaZkClient
from tidelog.storage.checkpoint import atomic_write

__all__ = [
    "DEFAULT_ENTITY",
    "FILE_NAME",
    "EntityConfigs",
    "EntityConfigsError",
    "EntityKind",
    "FileEntityConfigs",
    "USERS_AND_CLIENTS",
    "ZkEntityConfigs",
    "desanitize",
    "entity_path",
    "is_entity_path",
    "parse_entity_path",
    "sanitize",
]

FILE_NAME: Final = "tidelog-entity-configs.json"
DEFAULT_ENTITY: Final = "<default>"
"""The name of a default entity (``users/<default>``), as Kafka's ``ZooKeeperInternals.DEFAULT_STRING``."""
_FORMAT_VERSION: Final = 1

EntityListener = Callable[[str], None]


class EntityConfigsError(ValueError):
    """The entity configs file exists but cannot be read, or an entity path is malformed."""


def sanitize(name: str) -> str:
    """Kafka's ``Sanitizer.sanitize``: URL-encode (UTF-8), space as ``%20``, ``*`` as ``%2A``."""
    return urllib.parse.quote(name, safe="").replace("~", "%7E")


def desanitize(name: str) -> str:
    """Kafka's ``Sanitizer.desanitize``: the name :func:`sanitize` encoded."""
    return urllib.parse.unquote(name)


def entity_path(*, user: str | None = None, client_id: str | None = None) -> str:
    """The entity path of a user, a client id, or both; ``DEFAULT_ENTITY`` names a default."""
    if user is None and client_id is None:
        raise EntityConfigsError("an entity names a user, a client id, or both")

    def part(name: str) -> str:
        return name if name == DEFAULT_ENTITY else sanitize(name)

    if user is None:
        return f"clients/{part(client_id or '')}"
    if client_id is None:
        return f"users/{part(user)}"
    return f"users/{part(user)}/clients/{part(client_id)}"


def parse_entity_path(path: str) -> tuple[str | None, str | None]:
    """``(user, client_id)`` of an entity path, names desanitized (``DEFAULT_ENTITY`` kept as is); raises
    :class:`EntityConfigsError` for anything else."""
    parts = path.split("/")

    def name(raw: str) -> str:
        if not raw:
            raise EntityConfigsError(f"entity path {path!r} has an empty name")
        return raw if raw == DEFAULT_ENTITY else desanitize(raw)

    if len(parts) == 2 and parts[0] == "users":
        return name(parts[1]), None
    if len(parts) == 2 and parts[0] == "clients":
        return None, name(parts[1])
    if len(parts) == 4 and parts[0] == "users" and parts[2] == "clients":
        return name(parts[1]), name(parts[3])
    raise EntityConfigsError(f"{path!r} is not a user or client entity path")


def is_entity_path(path: str) -> bool:
    try:
        parse_entity_path(path)
    except EntityConfigsError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class EntityKind:
    """What one store holds: the entity paths it accepts, its file on a single node, the ``/config``
    children it reads in a cluster, and the words its errors use."""

    description: str
    """Names the store's contents in an error: ``the user and client configs``."""
    file_name: str
    """The store's file in the first log dir on a single node."""
    check_path: Callable[[str], object]
    """Raises :class:`EntityConfigsError` for a path that is not an entity of this kind."""
    zk_types: tuple[str, ...]
    """The ``/config/<type>`` children holding this kind's entities (``users`` also reads the nested
    ``users/<user>/clients``)."""
    without: str
    """What starting without the file would mean, for the damaged-file error."""

    def is_path(self, path: str) -> bool:
        try:
            self.check_path(path)
        except EntityConfigsError:
            return False
        return True


USERS_AND_CLIENTS: Final = EntityKind(
    description="the user and client configs",
    file_name=FILE_NAME,
    check_path=parse_entity_path,
    zk_types=("clients", "users"),
    without="to start without any client quota or SCRAM credential",
)
"""Kafka's ``/config/users`` and ``/config/clients``: client quotas and SCRAM credentials."""


def _changed(current: Mapping[str, str], set_: Mapping[str, str], delete: Collection[str]) -> dict[str, str]:
    updated = {key: value for key, value in current.items() if key not in delete}
    updated.update(set_)
    return updated


class EntityConfigs(ABC):
    """The user and client entity configs this broker knows, and how it changes them."""

    def __init__(self) -> None:
        self._entities: dict[str, dict[str, str]] = {}
        self._listeners: list[EntityListener] = []

    def get(self, path: str) -> Mapping[str, str]:
        """The configs of one entity (empty if it has none)."""
        return dict(self._entities.get(path, {}))

    def all(self) -> Mapping[str, Mapping[str, str]]:
        """Every entity with at least one config, by path."""
        return {path: dict(configs) for path, configs in self._entities.items()}

    def subscribe(self, listener: EntityListener) -> None:
        """Call ``listener(entity_path)`` after every change of an entity's configs."""
        self._listeners.append(listener)

    @abstractmethod
    async def alter(self, path: str, set: Mapping[str, str], delete: Collection[str] = ()) -> None:
        """Set ``set`` and remove ``delete`` in one entity's configs, durably; other keys are kept."""

    def _apply(self, path: str, configs: Mapping[str, str]) -> None:
        if configs:
            self._entities[path] = dict(configs)
        else:
            self._entities.pop(path, None)
        for listener in list(self._listeners):
            listener(path)


class FileEntityConfigs(EntityConfigs):
    """A single node's entity configs, in one file in its first log dir."""

    def __init__(self, directory: Path, kind: EntityKind = USERS_AND_CLIENTS) -> None:
        super().__init__()
        self.kind = kind
        self.path = directory / kind.file_name
        self._entities = self._load()

    async def alter(self, path: str, set: Mapping[str, str], delete: Collection[str] = ()) -> None:
        self.alter_now(path, set, delete)

    def alter_now(self, path: str, set: Mapping[str, str], delete: Collection[str] = ()) -> None:
        """:meth:`alter` without an event loop (the offline bootstrap of a first SCRAM user)."""
        self.kind.check_path(path)
        updated = _changed(self._entities.get(path, {}), set, delete)
        entities = {**self._entities, path: updated}
        if not updated:
            del entities[path]
        document: dict[str, Any] = {"version": _FORMAT_VERSION, "entities": entities}
        document["crc32c"] = json_crc32c(entities)
        atomic_write(self.path, json.dumps(document, indent=1, sort_keys=True).encode("utf-8"), mode=0o600)
        self._apply(path, updated)

    def _load(self) -> dict[str, dict[str, str]]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise EntityConfigsError(f"cannot read {self.path}: {exc}") from exc
        try:
            document = json.loads(raw.decode("utf-8"))
            if not isinstance(document, dict):
                raise TypeError(f"a JSON {type(document).__name__}, not an object")
            if document.get("version") != _FORMAT_VERSION:
                raise ValueError(f"unsupported format version {document.get('version')!r}")
            entities = document.get("entities")
            if not isinstance(entities, dict) or not all(
                isinstance(configs, dict) and all(isinstance(v, str) for v in configs.values())
                for configs in entities.values()
            ):
                raise TypeError("entities is not a map of entity paths to string configs")
            if document.get("crc32c") != json_crc32c(entities):
                raise ValueError(
                    f"CRC32C {json_crc32c(entities)} of the entities, {document.get('crc32c')} stored"
                )
            for path in entities:
                self.kind.check_path(path)
        except (ValueError, TypeError) as exc:
            raise EntityConfigsError(
                f"{self.kind.description} in {self.path} are damaged ({exc}); restore the file from a "
                f"backup, or remove it {self.kind.without}"
            ) from exc
        return {path: dict(configs) for path, configs in entities.items() if configs}


def _zk_location(path: str) -> tuple[str, str]:
    """``(entity_type, entity_name)`` for :class:`KafkaZkClient`: ``users/alice/clients/c`` is the entity
    ``c`` of type ``users/alice/clients`` (``/config/users/alice/clients/c``, as Kafka nests it); the
    caller has checked the path."""
    entity_type, _, name = path.rpartition("/")
    return entity_type, name


class ZkEntityConfigs(EntityConfigs):
    """A cluster's entity configs: ZooKeeper's ``/config/users`` and ``/config/clients`` (or the children
    its :class:`EntityKind` names), cached here.

    :meth:`load` reads them all (before the broker serves); the metadata watcher calls :meth:`reload` for
    each change notification, and a store ignores the paths that are not of its kind.
    """

    def __init__(self, zk: KafkaZkClient, kind: EntityKind = USERS_AND_CLIENTS) -> None:
        super().__init__()
        self._zk = zk
        self.kind = kind

    async def load(self) -> None:
        entities: dict[str, dict[str, str]] = {}
        for entity_type in self.kind.zk_types:
            for name in await self._zk.get_all_entities_with_config(entity_type):
                entities[f"{entity_type}/{name}"] = await self._zk.get_entity_config(entity_type, name)
                if entity_type != "users":
                    continue
                for client in await self._zk.get_all_entities_with_config(f"users/{name}/clients"):
                    nested = f"users/{name}/clients/{client}"
                    entities[nested] = await self._zk.get_entity_config(f"users/{name}/clients", client)
        self._entities = {
            path: configs for path, configs in entities.items() if configs and self.kind.is_path(path)
        }

    async def reload(self, path: str) -> None:
        """Read one entity again (a change notification named it) and tell the subscribers."""
        if not self.kind.is_path(path):
            return
        self._apply(path, await self._zk.get_entity_config(*_zk_location(path)))

    async def alter(self, path: str, set: Mapping[str, str], delete: Collection[str] = ()) -> None:
        self.kind.check_path(path)
        entity_type, name = _zk_location(path)
        # Read what is stored, not the cache: another broker may have changed other keys a moment ago.
        updated = _changed(await self._zk.get_entity_config(entity_type, name), set, delete)
        await self._zk.change_entity_config(entity_type, name, updated)
        self._apply(path, updated)
