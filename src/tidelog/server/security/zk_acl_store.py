"""Cluster mode's ACLs: in ZooKeeper, in Kafka's layout (``kafka.zk.ZkData`` / ``AclAuthorizer``, 3.x), applied
on every broker through change notifications.

Layout (exactly Kafka's, so a Kafka cluster's ACL znodes read as tidelog's and back):

- LITERAL: ``/kafka-acl/<ResourceType>/<name>``; PREFIXED: ``/kafka-acl-extended/prefixed/<ResourceType>/<name>``
  (``Topic``, ``Group``, ``Cluster``, ``TransactionalId``), each holding
  ``{"version":1,"acls":[{"principal":...,"permissionType":"Allow","operation":"Read","host":"*"}]}``.
- After a change, a sequential ``/kafka-acl-changes/acl_changes_<seq>`` holding ``TOPIC:<name>`` (literal), or
  ``/kafka-acl-extended-changes/acl_changes_<seq>`` holding ``{"version":1,"resourceType":"TOPIC","name":...,
  "patternType":"PREFIXED"}``.

Invariants:

- A change is a conditional update of the resource's znode with the version read (create when absent,
  delete when no ACL is left), retried on a lost race by re-reading: two brokers changing the same resource
  at once both land, neither overwrites the other (Kafka's ``updateResourceAcls``).
- The change is in ZooKeeper, and its notification created, before it is applied to this broker's
  authorizer and answered; every broker (this one too) re-reads a notified resource's znode whole and
  replaces that resource's ACLs with it, so all converge to ZooKeeper's content.
- :meth:`ZkAclStore.start` reads every ACL before it returns, and sets the watches; after a lost session
  the watches re-read and notifications are processed again (re-reading a resource is idempotent).
- Notifications created more than 15 minutes before the newest one are deleted by whichever broker gets
  there first (Kafka's purge; ZooKeeper's creation times on both sides, so no broker clock is involved).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Final

from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError, NotEmptyError

from tidelog.server.zk.client import KafkaZkClient
from tidelog.server.zk.session import Watch

from .acl import AclBinding, AclBindingFilter, PatternType, ResourceType
from .acl_codec import decode_resource_acls, encode_resource_acls, parse_resource_type, resource_type_name
from .acl_store import AclStoreError
from .authorizer import AclAuthorizer

__all__ = [
    "EXTENDED_ACL_CHANGES",
    "LITERAL_ACL_CHANGES",
    "ZkAclStore",
    "acl_change_notification",
    "acl_znode_path",
    "parse_acl_change_notification",
]

log = logging.getLogger("tidelog.security.acls")

LITERAL_ACL_ROOT: Final = "/kafka-acl"
PREFIXED_ACL_ROOT: Final = "/kafka-acl-extended/prefixed"
LITERAL_ACL_CHANGES: Final = "/kafka-acl-changes"
EXTENDED_ACL_CHANGES: Final = "/kafka-acl-extended-changes"
CHANGE_PREFIX: Final = "acl_changes_"
NOTIFICATION_EXPIRY_MS: Final = 15 * 60 * 1000
"""Kafka's ``ZkNodeChangeNotificationListener`` change expiration."""

_Pattern = tuple[ResourceType, str, PatternType]
_Change = Callable[[set[AclBinding]], set[AclBinding]]


def _root(pattern_type: PatternType) -> str:
    return PREFIXED_ACL_ROOT if pattern_type == PatternType.PREFIXED else LITERAL_ACL_ROOT


def acl_znode_path(resource_type: ResourceType, name: str, pattern_type: PatternType) -> str:
    return f"{_root(pattern_type)}/{resource_type_name(resource_type)}/{name}"


def acl_change_notification(
    resource_type: ResourceType, name: str, pattern_type: PatternType
) -> tuple[str, bytes]:
    """(parent path, data) of the change notification for a resource pattern, as Kafka writes it."""
    if pattern_type == PatternType.LITERAL:
        return LITERAL_ACL_CHANGES, f"{resource_type.name}:{name}".encode()
    event = {"version": 1, "resourceType": resource_type.name, "name": name, "patternType": pattern_type.name}
    return EXTENDED_ACL_CHANGES, json.dumps(event, separators=(",", ":")).encode()


def parse_acl_change_notification(parent: str, data: bytes) -> _Pattern:
    """The resource pattern a notification names (ValueError if it names none)."""
    if parent == LITERAL_ACL_CHANGES:
        kind, sep, name = data.decode("utf-8").partition(":")
        if not sep:
            raise ValueError(f"expected ResourceType:ResourceName, got {data!r}")
        return _resource_type(kind), name, PatternType.LITERAL
    event = json.loads(data.decode("utf-8"))
    return (
        _resource_type(str(event["resourceType"])),
        str(event["name"]),
        PatternType[str(event["patternType"]).upper()],
    )


def _resource_type(text: str) -> ResourceType:
    """``TOPIC`` (enum name, Kafka's ``ResourceType.fromString``) or ``Topic`` (znode name)."""
    try:
        return ResourceType[text.upper()]
    except KeyError:
        return parse_resource_type(text)


class ZkAclStore:
    """ACLs in ZooKeeper, mirrored into this broker's authorizer."""

    def __init__(self, zk: KafkaZkClient, authorizer: AclAuthorizer) -> None:
        self._zk = zk
        self.authorizer = authorizer
        self._watches: list[Watch] = []
        self._last_seen: dict[str, int] = {LITERAL_ACL_CHANGES: -1, EXTENDED_ACL_CHANGES: -1}
        self._created_ms: dict[str, int] = {}
        """Notification path -> its creation time (ZooKeeper's clock), for the purge."""
        self._events: asyncio.Queue[tuple[str, list[str]]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    # -- lifecycle -------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Read every ACL into the authorizer, then follow the change notifications."""
        session = self._zk.session
        for path in (LITERAL_ACL_CHANGES, EXTENDED_ACL_CHANGES):
            await session.ensure_path(path)
            children = await session.get_children(path) or []
            self._last_seen[path] = max((_sequence(c) for c in children), default=-1)
            for child in children:
                stat = await session.exists(f"{path}/{child}")
                if stat is not None:
                    self._created_ms[f"{path}/{child}"] = stat.ctime
        bindings: list[AclBinding] = []
        for pattern_type in (PatternType.LITERAL, PatternType.PREFIXED):
            root = _root(pattern_type)
            for type_name in await session.get_children(root) or []:
                resource_type = _resource_type(type_name)
                for name in await session.get_children(f"{root}/{type_name}") or []:
                    bindings += await self._read(resource_type, name, pattern_type)
        self.authorizer.replace(bindings)
        log.info("loaded %d ACLs from ZooKeeper", len(bindings))
        self._task = asyncio.get_running_loop().create_task(self._run())
        self._watches = [
            session.watch_children(path, self._enqueue(path))
            for path in (LITERAL_ACL_CHANGES, EXTENDED_ACL_CHANGES)
        ]

    def _enqueue(self, parent: str) -> Callable[[list[str] | None], None]:
        def on_children(children: list[str] | None) -> None:
            self._events.put_nowait((parent, children or []))

        return on_children

    async def stop(self) -> None:
        for watch in self._watches:
            watch.cancel()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            parent, children = await self._events.get()
            try:
                await self._on_changes(parent, children)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("applying ACL change notifications under %s failed", parent)

    async def _on_changes(self, parent: str, children: list[str]) -> None:
        for child in sorted(children, key=_sequence):
            number = _sequence(child)
            if number <= self._last_seen[parent]:
                continue
            self._last_seen[parent] = number
            found = await self._zk.session.get(f"{parent}/{child}")
            if found is None:
                continue
            self._created_ms[f"{parent}/{child}"] = found[1].ctime
            try:
                pattern = parse_acl_change_notification(parent, found[0])
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("ignoring the ACL change notification %s/%s: %s", parent, child, exc)
                continue
            await self._reload(*pattern)
        await self._purge()

    async def _purge(self) -> None:
        """Kafka's ``purgeObsoleteNotifications``: delete notifications created more than 15 minutes before
        the newest one seen (every broker has applied them by then; ZooKeeper's clock on both sides)."""
        if not self._created_ms:
            return
        horizon = max(self._created_ms.values()) - NOTIFICATION_EXPIRY_MS
        for path, created in list(self._created_ms.items()):
            if created < horizon:
                with contextlib.suppress(NoNodeError):
                    await self._zk.session.delete(path)
                del self._created_ms[path]

    # -- reads -----------------------------------------------------------------------------------------

    async def _read(
        self, resource_type: ResourceType, name: str, pattern_type: PatternType
    ) -> list[AclBinding]:
        found = await self._zk.session.get(acl_znode_path(resource_type, name, pattern_type))
        return decode_resource_acls(resource_type, name, pattern_type, found[0] if found else None)

    async def _reload(self, resource_type: ResourceType, name: str, pattern_type: PatternType) -> None:
        """Replace the resource pattern's ACLs in the authorizer with ZooKeeper's."""
        current = await self._read(resource_type, name, pattern_type)
        self._apply((resource_type, name, pattern_type), current)

    def _apply(self, pattern: _Pattern, bindings: Iterable[AclBinding]) -> None:
        resource_type, name, pattern_type = pattern
        old = self.authorizer.bindings(AclBindingFilter(resource_type, name, pattern_type))
        self.authorizer.remove(old)
        self.authorizer.add(bindings)

    # -- changes ---------------------------------------------------------------------------------------

    async def create(self, bindings: Sequence[AclBinding]) -> None:
        for pattern, added in _by_pattern(bindings).items():
            await self._update(pattern, _adding(added))

    async def delete(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding]]:
        matched = [self.authorizer.bindings(f) for f in filters]
        for pattern, removed in _by_pattern([b for found in matched for b in found]).items():
            await self._update(pattern, _removing(removed))
        return matched

    async def _update(self, pattern: _Pattern, change: _Change) -> None:
        """Kafka's ``updateResourceAcls``: read with the version, write conditionally, retry on a lost race;
        then notify every broker and apply here."""
        session = self._zk.session
        path = acl_znode_path(*pattern)
        try:
            while True:
                found = await session.get(path)
                current = set(decode_resource_acls(*pattern, found[0] if found else None))
                wanted = change(current)
                if wanted == current:
                    break
                try:
                    if found is None:
                        await self._create_path(path, encode_resource_acls(wanted))
                    elif wanted:
                        await session.set(path, encode_resource_acls(wanted), version=found[1].version)
                    else:
                        await session.delete(path, version=found[1].version)
                except (BadVersionError, NodeExistsError, NoNodeError, NotEmptyError):
                    continue  # another broker changed it first: read theirs and apply the change to it
                parent, data = acl_change_notification(*pattern)
                await self._create_notification(parent, data)
                break
        except (OSError, RuntimeError, KazooException) as exc:
            raise AclStoreError(f"ZooKeeper: {exc}") from exc
        self._apply(pattern, wanted)

    async def _create_path(self, path: str, data: bytes) -> None:
        try:
            await self._zk.session.create(path, data)
        except NoNodeError:
            await self._zk.session.ensure_path(path.rsplit("/", 1)[0])
            await self._zk.session.create(path, data)

    async def _create_notification(self, parent: str, data: bytes) -> None:
        try:
            await self._zk.session.create(f"{parent}/{CHANGE_PREFIX}", data, sequence=True)
        except NoNodeError:
            await self._zk.session.ensure_path(parent)
            await self._zk.session.create(f"{parent}/{CHANGE_PREFIX}", data, sequence=True)


def _adding(added: Iterable[AclBinding]) -> _Change:
    def change(current: set[AclBinding]) -> set[AclBinding]:
        return current | set(added)

    return change


def _removing(removed: Iterable[AclBinding]) -> _Change:
    def change(current: set[AclBinding]) -> set[AclBinding]:
        return current - set(removed)

    return change


def _sequence(child: str) -> int:
    return int(child.rsplit("_", 1)[-1])


def _by_pattern(bindings: Iterable[AclBinding]) -> dict[_Pattern, list[AclBinding]]:
    groups: dict[_Pattern, list[AclBinding]] = {}
    for b in bindings:
        groups.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(b)
    return groups
