"""SaslHandshake, SaslAuthenticate when no SASL exchange is due, and KIP-554's SCRAM credential APIs.

Invariants:

- On a SASL_* listener the connection's :class:`~tidelog.server.security.sasl_session.SaslSession`
  answers SaslHandshake / SaslAuthenticate while an exchange is due; a request that reaches these handlers
  came on a PLAINTEXT listener or after authentication, and gets ILLEGAL_SASL_STATE (as Kafka's
  ``KafkaApis``). The routes exist so that ApiVersions advertises them: SaslHandshake from v1 only
  (tokens inside SaslAuthenticate; no client we support sends v0's unframed tokens), SaslAuthenticate 0-2.
- DescribeUserScramCredentials never returns salts or keys, only mechanisms and iterations.
- AlterUserScramCredentials writes each user's accepted alterations in one entity-config change (durable
  before the answer), and nothing for a user with any refused alteration.
"""

from __future__ import annotations

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from tidelog.protocol.scram import SCRAM_MECHANISMS
from tidelog.server.dispatch import RequestContext
from tidelog.server.entity_configs import EntityConfigs, entity_path
from tidelog.server.security.acl import AclOperation
from tidelog.server.security.scram_credentials import Alteration, plan_alterations, scram_users

from .authz import Authz, cluster_allowed

__all__ = ["SaslHandler", "ScramCredentialsHandler"]

_DescribeResult = DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult
_Info = DescribeUserScramCredentialsResponse.CredentialInfo
_AlterResult = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult


class SaslHandler:
    """SaslHandshake / SaslAuthenticate outside an exchange: ILLEGAL_SASL_STATE."""

    def handshake(self, ctx: RequestContext, request: SaslHandshakeRequest) -> SaslHandshakeResponse:
        return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])

    def authenticate(self, ctx: RequestContext, request: SaslAuthenticateRequest) -> SaslAuthenticateResponse:
        return SaslAuthenticateResponse(
            error_code=ErrorCode.ILLEGAL_SASL_STATE,
            error_message="SaslAuthenticate request received after successful authentication",
            auth_bytes=b"",
        )


class ScramCredentialsHandler:
    """DescribeUserScramCredentials / AlterUserScramCredentials over the user entity configs."""

    def __init__(self, configs: EntityConfigs, authz: Authz = None) -> None:
        self._configs = configs
        self._authz = authz

    def _authorized(self, ctx: RequestContext, operation: str) -> bool:
        """Kafka checks DESCRIBE (describe) / ALTER (alter) on the CLUSTER resource and answers
        CLUSTER_AUTHORIZATION_FAILED for every user otherwise."""
        op = AclOperation.DESCRIBE if operation == "DESCRIBE" else AclOperation.ALTER
        return cluster_allowed(self._authz, ctx, op)

    def describe(
        self, ctx: RequestContext, request: DescribeUserScramCredentialsRequest
    ) -> DescribeUserScramCredentialsResponse:
        if not self._authorized(ctx, "DESCRIBE"):
            return DescribeUserScramCredentialsResponse(
                error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=None, results=[]
            )
        users = scram_users(self._configs)
        wanted = None if not request.users else [u.name for u in request.users]
        results = []
        if wanted is None:
            names = sorted(users)
        else:
            names = wanted
        counts: dict[str, int] = {}
        for name in names:
            counts[name] = counts.get(name, 0) + 1
        for name in dict.fromkeys(names):
            if counts[name] > 1:
                results.append(
                    _DescribeResult(
                        user=name,
                        error_code=ErrorCode.DUPLICATE_RESOURCE,
                        error_message=f"Cannot describe SCRAM credentials for the same user twice in a single request: {name}",
                    )
                )
            elif name not in users:
                results.append(
                    _DescribeResult(
                        user=name,
                        error_code=ErrorCode.RESOURCE_NOT_FOUND,
                        error_message=f"Attempt to describe a user credential that does not exist: {name}",
                    )
                )
            else:
                infos = [
                    _Info(mechanism=SCRAM_MECHANISMS[m].wire_type, iterations=c.iterations)
                    for m, c in sorted(users[name].items())
                ]
                results.append(
                    _DescribeResult(
                        user=name, error_code=ErrorCode.NONE, error_message=None, credential_infos=infos
                    )
                )
        return DescribeUserScramCredentialsResponse(
            error_code=ErrorCode.NONE, error_message=None, results=results
        )

    async def alter(
        self, ctx: RequestContext, request: AlterUserScramCredentialsRequest
    ) -> AlterUserScramCredentialsResponse:
        alterations = [Alteration(d.name, d.mechanism) for d in request.deletions] + [
            Alteration(u.name, u.mechanism, u.iterations, u.salt, u.salted_password)
            for u in request.upsertions
        ]
        if not self._authorized(ctx, "ALTER"):
            users = dict.fromkeys(a.user for a in alterations)
            return AlterUserScramCredentialsResponse(
                results=[
                    _AlterResult(
                        user=u, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=None
                    )
                    for u in users
                ]
            )
        outcomes = plan_alterations(alterations, scram_users(self._configs))
        results = []
        for user, outcome in outcomes.items():
            if outcome.error_code == ErrorCode.NONE:
                try:
                    await self._configs.alter(entity_path(user=user), outcome.set, outcome.delete)
                except (
                    OSError,
                    ValueError,
                ) as exc:  # a store that cannot be written answers, never kills the connection
                    outcome.fail(ErrorCode.UNKNOWN_SERVER_ERROR, f"cannot store the credentials: {exc}")
            results.append(
                _AlterResult(user=user, error_code=outcome.error_code, error_message=outcome.error_message)
            )
        return AlterUserScramCredentialsResponse(results=results)
