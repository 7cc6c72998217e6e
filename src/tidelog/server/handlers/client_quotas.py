"""DescribeClientQuotas (48) and AlterClientQuotas (49): client quotas in the user and client entity
configs (Kafka's ``ZkAdminManager.describeClientQuotas`` / ``alterClientQuotas``, KRaft's validation).

Invariants:

- Entity types are ``user`` and ``client-id``; a null name is the default entity. tidelog has no IP
  quotas (``ip``): a filter on ``ip`` matches nothing, an alteration of one is INVALID_REQUEST.
- Describe: filter components match EXACT (that name), DEFAULT (the default entity) or SPECIFIED (any
  name, the default included); a type without a component matches anything, or with ``strict`` only
  entities without that type. Only quota keys are described, as doubles; entities without a quota key
  are left out. A malformed filter answers the request's error code and message and no entries.
- Alter: each entry succeeds or fails on its own, with Kafka's INVALID_REQUEST messages (empty or
  duplicate entity types, unknown keys, values that are not > 0, fractional byte rates, a key twice).
  ``validate_only`` changes nothing. A successful entry is durable in the store when answered, and every
  broker applies it (the store's change notifications).
- Authorization (Kafka's): describing needs DESCRIBE_CONFIGS on the cluster (else the request's error is
  CLUSTER_AUTHORIZATION_FAILED), altering ALTER_CONFIGS on the cluster (else every entry fails with it).
"""

from __future__ import annotations

from collections.abc import Mapping

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)
from tidelog.server.dispatch import RequestContext
from tidelog.server.entity_configs import EntityConfigs
from tidelog.server.handlers.authz import Authz, cluster_allowed
from tidelog.server.security.acl import AclOperation
from tidelog.server.security.quota_entity import (
    CLIENT_ID,
    QUOTA_KEYS,
    USER,
    EntityName,
    QuotaEntity,
    quota_value_error,
)

__all__ = ["ClientQuotasHandler"]

_EXACT, _DEFAULT, _SPECIFIED = 0, 1, 2
_IP = "ip"
_WHOLE_KEYS = frozenset({"producer_byte_rate", "consumer_byte_rate"})


class _FilterError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _matches(
    component: DescribeClientQuotasRequest.ComponentData | None, part: EntityName | None, strict: bool
) -> bool:
    if component is None:
        return part is None or not strict
    if part is None:
        return False
    if component.match_type == _EXACT:
        return part.name is not None and part.name == component.match
    if component.match_type == _DEFAULT:
        return part.name is None
    return True


def _value_text(key: str, value: float) -> str:
    return str(round(value)) if key in _WHOLE_KEYS else repr(float(value))


class ClientQuotasHandler:
    """DescribeClientQuotas and AlterClientQuotas over the entity configs store."""

    def __init__(self, store: EntityConfigs, authz: Authz = None) -> None:
        self._store = store
        self._authz = authz

    def describe(
        self, ctx: RequestContext, request: DescribeClientQuotasRequest
    ) -> DescribeClientQuotasResponse:
        if not cluster_allowed(self._authz, ctx, AclOperation.DESCRIBE_CONFIGS):
            code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            return DescribeClientQuotasResponse(error_code=code, error_message=None, entries=None)
        try:
            components = self._components(request.components)
        except _FilterError as exc:
            return DescribeClientQuotasResponse(error_code=exc.code, error_message=str(exc), entries=None)
        response = DescribeClientQuotasResponse(error_code=ErrorCode.NONE, error_message=None, entries=[])
        if _IP in components:
            return response
        entries = []
        for path, configs in self._store.all().items():
            entity = QuotaEntity.from_path(path)
            quotas = _quota_values(configs)
            if entity is None or not quotas:
                continue
            if not (
                _matches(components.get(USER), entity.user, request.strict)
                and _matches(components.get(CLIENT_ID), entity.client_id, request.strict)
            ):
                continue
            entries.append(
                DescribeClientQuotasResponse.EntryData(
                    entity=[
                        DescribeClientQuotasResponse.EntityData(entity_type=t, entity_name=n)
                        for t, n in entity.components()
                    ],
                    values=[
                        DescribeClientQuotasResponse.ValueData(key=k, value=v)
                        for k, v in sorted(quotas.items())
                    ],
                )
            )
        response.entries = entries
        return response

    @staticmethod
    def _components(
        components: list[DescribeClientQuotasRequest.ComponentData],
    ) -> dict[str, DescribeClientQuotasRequest.ComponentData]:
        found: dict[str, DescribeClientQuotasRequest.ComponentData] = {}
        for component in components:
            entity_type = component.entity_type
            if component.match_type not in (_EXACT, _DEFAULT, _SPECIFIED):
                raise _FilterError(ErrorCode.INVALID_REQUEST, f"Unexpected match type {component.match_type}")
            if entity_type == "":
                raise _FilterError(ErrorCode.INVALID_REQUEST, "Unexpected empty filter component entity type")
            if entity_type not in (USER, CLIENT_ID, _IP):
                raise _FilterError(
                    ErrorCode.UNSUPPORTED_VERSION, f"Custom entity type '{entity_type}' not supported"
                )
            if entity_type in found:
                what = {USER: "user", CLIENT_ID: "client", _IP: "ip"}[entity_type]
                raise _FilterError(
                    ErrorCode.INVALID_REQUEST, f"Duplicate {what} filter component entity type"
                )
            found[entity_type] = component
        if _IP in found and (USER in found or CLIENT_ID in found):
            raise _FilterError(
                ErrorCode.INVALID_REQUEST,
                "Invalid entity filter component combination, IP filter component should not be used with "
                "user or clientId filter component.",
            )
        return found

    async def alter(
        self, ctx: RequestContext, request: AlterClientQuotasRequest
    ) -> AlterClientQuotasResponse:
        response = AlterClientQuotasResponse()
        allowed = cluster_allowed(self._authz, ctx, AclOperation.ALTER_CONFIGS)
        for entry in request.entries:
            result = AlterClientQuotasResponse.EntryData(
                error_code=ErrorCode.NONE,
                error_message=None,
                entity=[
                    AlterClientQuotasResponse.EntityData(entity_type=e.entity_type, entity_name=e.entity_name)
                    for e in entry.entity
                ],
            )
            response.entries.append(result)
            if not allowed:
                result.error_code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                continue
            entity, problem = _entity(entry.entity)
            sets: dict[str, str] = {}
            deletes: list[str] = []
            if entity is not None:
                problem = _ops(entry.ops, sets, deletes)
            if problem is not None or entity is None:
                result.error_code, result.error_message = ErrorCode.INVALID_REQUEST, problem
                continue
            if not request.validate_only:
                await self._store.alter(entity.path, sets, deletes)
        return response


def _quota_values(configs: Mapping[str, str]) -> dict[str, float]:
    values = {}
    for key, raw in configs.items():
        if key in QUOTA_KEYS:
            try:
                values[key] = float(raw)
            except ValueError:
                continue
    return values


def _entity(parts: list[AlterClientQuotasRequest.EntityData]) -> tuple[QuotaEntity | None, str | None]:
    if not parts:
        return None, "Invalid empty client quota entity"
    names: dict[str, EntityName] = {}
    for part in parts:
        if part.entity_type in names:
            return None, f"Invalid client quota entity, duplicate entity entry {part.entity_type}"
        if part.entity_type == _IP:
            return None, "IP quotas (connection_creation_rate) are not supported by tidelog"
        if part.entity_type not in (USER, CLIENT_ID):
            return None, f"Unhandled client quota entity type: {part.entity_type}"
        if part.entity_name == "":
            return None, f"Empty {part.entity_type} not supported"
        names[part.entity_type] = EntityName(part.entity_name)
    return QuotaEntity(names.get(USER), names.get(CLIENT_ID)), None


def _ops(ops: list[AlterClientQuotasRequest.OpData], sets: dict[str, str], deletes: list[str]) -> str | None:
    seen: set[str] = set()
    for op in ops:
        if op.key in seen:
            return f"Duplicate quota key {op.key} not updating quota for this entity"
        seen.add(op.key)
        if op.remove:
            if op.key not in QUOTA_KEYS:
                return f"Invalid configuration key {op.key}"
            deletes.append(op.key)
            continue
        problem = quota_value_error(op.key, op.value)
        if problem is not None:
            return problem
        sets[op.key] = _value_text(op.key, op.value)
    return None
