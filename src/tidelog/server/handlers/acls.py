"""DescribeAcls (29), CreateAcls (30), DeleteAcls (31): the ACLs of the authorizer, through its store.

Invariants (Kafka's ``AclApis``):

- Without an authorizer (``authorizer.class.name`` unset) every answer is SECURITY_DISABLED ("No Authorizer
  is configured on the broker"), per creation / filter, or for the whole DescribeAcls.
- DescribeAcls needs DESCRIBE on the CLUSTER, CreateAcls and DeleteAcls ALTER on it; otherwise
  CLUSTER_AUTHORIZATION_FAILED.
- A filter with an UNKNOWN field (or a code Kafka does not define) is INVALID_REQUEST; so is a creation that
  is not a concrete binding (:func:`~tidelog.server.security.acl.binding_error` names why). The valid
  creations of a request are stored together, the invalid ones answered on their own.
- DescribeAcls groups its bindings by resource pattern, in a stable order.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import TypeVar

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
)
from tidelog.server.dispatch import RequestContext
from tidelog.server.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    binding_error,
    filter_error,
)
from tidelog.server.security.acl_store import AclStore, AclStoreError

__all__ = ["AclsHandler"]

_CreateResult = CreateAclsResponse.AclCreationResult
_FilterResult = DeleteAclsResponse.DeleteAclsFilterResult
_DISABLED = "No Authorizer is configured on the broker"
_E = TypeVar("_E", bound=enum.IntEnum)


def _code(kind: type[_E], value: int) -> _E:
    """A wire code as the enum, UNKNOWN (0) for a code Kafka does not define."""
    try:
        return kind(value)
    except ValueError:
        return kind(0)


def _filter(f: DescribeAclsRequest | DeleteAclsRequest.DeleteAclsFilter) -> AclBindingFilter:
    return AclBindingFilter(
        _code(ResourceType, f.resource_type_filter),
        f.resource_name_filter,
        _code(PatternType, f.pattern_type_filter),
        f.principal_filter,
        f.host_filter,
        _code(AclOperation, f.operation),
        _code(AclPermissionType, f.permission_type),
    )


class AclsHandler:
    """The three ACL APIs over an :class:`AclStore`; ``None`` when no authorizer is configured."""

    def __init__(self, store: AclStore | None) -> None:
        self._store = store

    def _refusal(self, ctx: RequestContext, operation: AclOperation) -> tuple[ErrorCode, str | None] | None:
        """``(error code, message)`` for a request refused whole: no authorizer (SECURITY_DISABLED), or no
        ``operation`` on the cluster (CLUSTER_AUTHORIZATION_FAILED); ``None`` when it may go on."""
        if self._store is None:
            return ErrorCode.SECURITY_DISABLED, _DISABLED
        if not self._store.authorizer.permits(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME):
            return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None
        return None

    def describe_acls(self, ctx: RequestContext, request: DescribeAclsRequest) -> DescribeAclsResponse:
        refusal = self._refusal(ctx, AclOperation.DESCRIBE)
        if refusal is not None:
            return DescribeAclsResponse(error_code=refusal[0], error_message=refusal[1])
        assert self._store is not None  # else refused
        acl_filter = _filter(request)
        problem = filter_error(acl_filter)
        if problem is not None:
            return DescribeAclsResponse(error_code=ErrorCode.INVALID_REQUEST, error_message=problem)
        resources: dict[tuple[int, str, int], list[DescribeAclsResponse.AclDescription]] = {}
        for b in self._store.authorizer.bindings(acl_filter):
            resources.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(
                DescribeAclsResponse.AclDescription(
                    principal=b.principal, host=b.host, operation=b.operation, permission_type=b.permission
                )
            )
        return DescribeAclsResponse(
            error_code=ErrorCode.NONE,
            error_message=None,
            resources=[
                DescribeAclsResponse.DescribeAclsResource(
                    resource_type=kind, resource_name=name, pattern_type=pattern, acls=acls
                )
                for (kind, name, pattern), acls in resources.items()
            ],
        )

    async def create_acls(self, ctx: RequestContext, request: CreateAclsRequest) -> CreateAclsResponse:
        refusal = self._refusal(ctx, AclOperation.ALTER)
        if refusal is not None:
            code, message = refusal
            return CreateAclsResponse(
                results=[_CreateResult(error_code=code, error_message=message) for _ in request.creations]
            )
        assert self._store is not None  # else refused
        results: list[_CreateResult] = []
        valid: list[AclBinding] = []
        for creation in request.creations:
            binding = AclBinding(
                _code(ResourceType, creation.resource_type),
                creation.resource_name,
                _code(PatternType, creation.resource_pattern_type),
                creation.principal,
                creation.host,
                _code(AclOperation, creation.operation),
                _code(AclPermissionType, creation.permission_type),
            )
            problem = binding_error(binding)
            if problem is None:
                valid.append(binding)
                results.append(_CreateResult(error_code=ErrorCode.NONE, error_message=None))
            else:
                results.append(_CreateResult(error_code=ErrorCode.INVALID_REQUEST, error_message=problem))
        if valid:
            try:
                await self._store.create(valid)
            except AclStoreError as exc:  # the store failed: none of them is stored
                for result in results:
                    if result.error_code == ErrorCode.NONE:
                        result.error_code = ErrorCode.UNKNOWN_SERVER_ERROR
                        result.error_message = f"the ACLs could not be stored: {exc}"
        return CreateAclsResponse(results=results)

    async def delete_acls(self, ctx: RequestContext, request: DeleteAclsRequest) -> DeleteAclsResponse:
        refusal = self._refusal(ctx, AclOperation.ALTER)
        if refusal is not None:
            code, message = refusal
            return DeleteAclsResponse(
                filter_results=[
                    _FilterResult(error_code=code, error_message=message) for _ in request.filters
                ]
            )
        assert self._store is not None  # else refused
        filters = [_filter(f) for f in request.filters]
        problems = [filter_error(f) for f in filters]
        usable = [f for f, problem in zip(filters, problems, strict=True) if problem is None]
        try:
            removed = iter(await self._store.delete(usable))
        except AclStoreError as exc:
            return DeleteAclsResponse(
                filter_results=[
                    _FilterResult(
                        error_code=ErrorCode.UNKNOWN_SERVER_ERROR,
                        error_message=f"the ACLs could not be stored: {exc}",
                    )
                    for _ in filters
                ]
            )
        results = []
        for problem in problems:
            if problem is not None:
                results.append(_FilterResult(error_code=ErrorCode.INVALID_REQUEST, error_message=problem))
            else:
                results.append(
                    _FilterResult(
                        error_code=ErrorCode.NONE, error_message=None, matching_acls=_matching(next(removed))
                    )
                )
        return DeleteAclsResponse(filter_results=results)


def _matching(bindings: Sequence[AclBinding]) -> list[DeleteAclsResponse.DeleteAclsMatchingAcl]:
    return [
        DeleteAclsResponse.DeleteAclsMatchingAcl(
            error_code=ErrorCode.NONE,
            error_message=None,
            resource_type=b.resource_type,
            resource_name=b.resource_name,
            pattern_type=b.pattern_type,
            principal=b.principal,
            host=b.host,
            operation=b.operation,
            permission_type=b.permission,
        )
        for b in bindings
    ]
