"""Where ACLs are kept: the interface the ACL APIs use, and the single-node store (a file in the first log dir).

Invariants:

- A change is durable before it is applied to the authorizer or answered: :meth:`LocalAclStore.create` and
  :meth:`~LocalAclStore.delete` replace ``<first log dir>/tidelog-acls.json`` crash-safely (temp file, fsync,
  rename, directory fsync), then update the authorizer. A process that dies between the two has the change
  on disk, and applies it when it starts again.
- The file carries a CRC32C of its ACLs (canonical JSON). Unlike dynamic configs, a damaged or unknown file
  is not ignored: ignoring it would start the broker with no ACLs, which either locks everyone out or, with
  ``allow.everyone.if.no.acl.found``, lets everyone in. :class:`AclFileError` names the file, and the broker
  does not start.
- Cluster mode keeps ACLs in ZooKeeper instead (zk_acl_store.py), behind the same :class:`AclStore` interface.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, Protocol

from tidelog.server.config import BrokerConfig
from tidelog.server.json_checksum import json_crc32c
from tidelog.storage.checkpoint import atomic_write

from .acl import AclBinding, AclBindingFilter, PatternType
from .acl_codec import decode_resource_acls, encode_resource_acls, parse_resource_type, resource_type_name
from .authorizer import AclAuthorizer, authorizer_enabled, parse_super_users

__all__ = [
    "ACL_FILE_NAME",
    "AclFileError",
    "AclStore",
    "AclStoreError",
    "LocalAclStore",
    "authorizer_from_config",
]

ACL_FILE_NAME: Final = "tidelog-acls.json"
_FORMAT_VERSION: Final = 1


def authorizer_from_config(config: BrokerConfig) -> AclAuthorizer | None:
    """The (empty) authorizer ``authorizer.class.name`` asks for, or None when it is unset."""
    if not authorizer_enabled(config.authorizer_class_name):
        return None
    return AclAuthorizer(
        super_users=parse_super_users(config.super_users),
        allow_everyone_if_no_acl_found=config.allow_everyone_if_no_acl_found,
    )


class AclFileError(RuntimeError):
    """The ACL file cannot be trusted; the broker refuses to start on it (``tidelog broker`` prints this one
    line and exits 1, as for a damaged topic metadata file)."""


class AclStoreError(Exception):
    """A change could not be stored; nothing of it is applied."""


class AclStore(Protocol):
    """Durable ACLs behind the ACL APIs; each method returns once the change is stored and applied here, or
    raises :class:`AclStoreError` having applied nothing."""

    authorizer: AclAuthorizer

    async def create(self, bindings: Sequence[AclBinding]) -> None: ...

    async def delete(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding]]:
        """Remove what each filter matches; per filter, the bindings it removed."""
        ...


def _resources(bindings: Sequence[AclBinding]) -> list[dict[str, Any]]:
    groups: dict[tuple[int, str, int], list[AclBinding]] = {}
    for binding in bindings:
        groups.setdefault((binding.resource_type, binding.resource_name, binding.pattern_type), []).append(
            binding
        )
    return [
        {
            "resourceType": resource_type_name(bindings[0].resource_type),
            "name": name,
            "patternType": bindings[0].pattern_type.name,
            "acls": json.loads(encode_resource_acls(bindings))["acls"],
        }
        for (_kind, name, _pattern), bindings in sorted(groups.items())
    ]


class LocalAclStore:
    """A single node's ACLs: one checksummed JSON file, loaded into the authorizer at construction."""

    def __init__(self, directory: Path, authorizer: AclAuthorizer) -> None:
        self.path = directory / ACL_FILE_NAME
        self.authorizer = authorizer
        authorizer.replace(self._load())

    async def create(self, bindings: Sequence[AclBinding]) -> None:
        existing = set(self.authorizer.bindings())
        new = [b for b in dict.fromkeys(bindings) if b not in existing]
        if not new:
            return
        self._write([*self.authorizer.bindings(), *new])
        self.authorizer.add(new)

    async def delete(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding]]:
        matched = [self.authorizer.bindings(f) for f in filters]
        removed = {b for found in matched for b in found}
        if removed:
            self._write([b for b in self.authorizer.bindings() if b not in removed])
            self.authorizer.remove(removed)
        return matched

    def _write(self, bindings: Sequence[AclBinding]) -> None:
        resources = _resources(bindings)
        document = {"version": _FORMAT_VERSION, "resources": resources, "crc32c": json_crc32c(resources)}
        try:
            atomic_write(self.path, json.dumps(document, indent=1, sort_keys=True).encode("utf-8"))
        except OSError as exc:
            raise AclStoreError(f"{self.path}: {exc}") from exc

    def _load(self) -> list[AclBinding]:
        try:
            document: Any = json.loads(self.path.read_text(encoding="utf-8"))
            if not isinstance(document, dict) or document.get("version") != _FORMAT_VERSION:
                raise ValueError(f"unsupported format {str(document)[:80]!r}")
            resources = document["resources"]
            if document.get("crc32c") != json_crc32c(resources):
                raise ValueError(
                    f"CRC32C {json_crc32c(resources)} of the ACLs, {document.get('crc32c')} stored"
                )
            bindings = []
            for resource in resources:
                bindings.extend(
                    decode_resource_acls(
                        parse_resource_type(resource["resourceType"]),
                        str(resource["name"]),
                        PatternType[resource["patternType"]],
                        json.dumps({"version": 1, "acls": resource["acls"]}).encode("utf-8"),
                    )
                )
        except FileNotFoundError:
            return []
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            raise AclFileError(
                f"the ACL file {self.path} is damaged ({type(exc).__name__}: {exc}); the broker does not start "
                "without its ACLs: restore the file, or remove it to start with none"
            ) from exc
        return bindings
