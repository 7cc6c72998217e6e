"""ACLs as Kafka writes them in ZooKeeper (``/kafka-acl/<ResourceType>/<name>``): the names and the JSON.

Invariants:

- A resource's document is Kafka's ``{"version":1,"acls":[{"principal":"User:alice","permissionType":
  "Allow","operation":"Read","host":"*"}]}``, entries in a stable order, so the same ACL set always encodes to
  the same bytes.
- Names are Kafka's (``SecurityUtils.resourceTypeName`` / ``operationName`` / ``permissionTypeName``):
  ``Topic``, ``Group``, ``Cluster``, ``TransactionalId``; ``Read``, ``IdempotentWrite``, ...; ``Allow``,
  ``Deny``. Decoding an unknown name raises ValueError naming it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Final

from .acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType

__all__ = [
    "decode_resource_acls",
    "encode_resource_acls",
    "operation_name",
    "parse_operation",
    "parse_resource_type",
    "resource_type_name",
]

_RESOURCE_NAMES: Final = {
    ResourceType.TOPIC: "Topic",
    ResourceType.GROUP: "Group",
    ResourceType.CLUSTER: "Cluster",
    ResourceType.TRANSACTIONAL_ID: "TransactionalId",
    ResourceType.DELEGATION_TOKEN: "DelegationToken",
}
_RESOURCE_BY_NAME: Final = {name: kind for kind, name in _RESOURCE_NAMES.items()}


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


_OPERATION_BY_NAME: Final = {_camel(op.name): op for op in AclOperation if op > AclOperation.ANY}
_PERMISSION_BY_NAME: Final = {"Allow": AclPermissionType.ALLOW, "Deny": AclPermissionType.DENY}


def resource_type_name(resource_type: ResourceType) -> str:
    return _RESOURCE_NAMES[resource_type]


def parse_resource_type(name: str) -> ResourceType:
    try:
        return _RESOURCE_BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown ACL resource type {name!r}") from None


def operation_name(operation: AclOperation) -> str:
    return _camel(operation.name)


def parse_operation(name: str) -> AclOperation:
    """An operation by Kafka's name (``Read``, ``IdempotentWrite``) or enum name (``READ``, ``idempotent_write``)."""
    found = _OPERATION_BY_NAME.get(name) or _OPERATION_BY_NAME.get(_camel(name.replace("-", "_")))
    if found is None:
        raise ValueError(f"unknown ACL operation {name!r}")
    return found


def _entry(binding: AclBinding) -> dict[str, str]:
    return {
        "principal": binding.principal,
        "permissionType": "Allow" if binding.permission == AclPermissionType.ALLOW else "Deny",
        "operation": operation_name(binding.operation),
        "host": binding.host,
    }


def encode_resource_acls(bindings: Iterable[AclBinding]) -> bytes:
    """One resource's document (every binding must be of the same resource pattern)."""
    entries = sorted((_entry(b) for b in bindings), key=lambda e: tuple(sorted(e.items())))
    return json.dumps({"version": 1, "acls": entries}, separators=(",", ":")).encode("utf-8")


def decode_resource_acls(
    resource_type: ResourceType, name: str, pattern_type: PatternType, data: bytes | None
) -> list[AclBinding]:
    """The bindings of one resource's document; an empty or missing document holds none."""
    if not data:
        return []
    document: Any = json.loads(data.decode("utf-8"))
    if not isinstance(document, dict) or document.get("version") != 1:
        raise ValueError(f"unsupported ACL document {document!r}")
    bindings = []
    for entry in document.get("acls", []):
        permission = _PERMISSION_BY_NAME.get(entry["permissionType"])
        if permission is None:
            raise ValueError(f"unknown ACL permission type {entry['permissionType']!r}")
        bindings.append(
            AclBinding(
                resource_type,
                name,
                pattern_type,
                str(entry["principal"]),
                str(entry["host"]),
                parse_operation(str(entry["operation"])),
                permission,
            )
        )
    return bindings
