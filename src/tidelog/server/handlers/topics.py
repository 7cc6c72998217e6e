"""CreateTopics (19), DeleteTopics (20) and CreatePartitions (37).

Invariants: a topic name is valid as Kafka defines it (1-249 chars of [a-zA-Z0-9._-], not "." or "..");
every error is reported per topic with Kafka's code and a message naming the problem; ``validate_only``
changes nothing; partitions can only be added, never removed; a replication factor above the live
brokers is INVALID_REPLICATION_FACTOR, an assignment naming a broker that is not alive
INVALID_REPLICA_ASSIGNMENT. In a cluster the answer waits (up to the request's ``timeout_ms``) until the
metadata shows the change (REQUEST_TIMED_OUT after that: the change stands, as in Kafka).
Each created, added or deleted partition counts against the client's ``controller_mutation_rate``
(KIP-599), taken just before the change: from CreateTopics v6, CreatePartitions v3 and DeleteTopics v5 the
quota is strict (a topic asked for while it is exhausted fails with THROTTLING_QUOTA_EXCEEDED), older
versions are throttled only; the response's ``throttle_time_ms`` says how long.

Authorization (Kafka's): creating a topic needs CREATE on the cluster or on the topic, and its configs are
returned only with DESCRIBE_CONFIGS on it (else ``topic_config_error_code`` TOPIC_AUTHORIZATION_FAILED);
deleting needs DELETE on the topic (asked for by id: DESCRIBE too, else the name is left out); adding
partitions needs ALTER. A refused topic is TOPIC_AUTHORIZATION_FAILED before its existence is looked at.
"""

from __future__ import annotations

import re
import uuid

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from tidelog.server.admin_errors import AdminError
from tidelog.server.admin_manager import TopicAdmin
from tidelog.server.clock import SYSTEM_CLOCK, Clock
from tidelog.server.config import ConfigError, describe_topic_configs, validate_topic_configs
from tidelog.server.dispatch import RequestContext
from tidelog.server.handlers.authz import Authz, cluster_allowed, topic_allowed
from tidelog.server.metadata_cache import MetadataCache, TopicInfo
from tidelog.server.security.acl import AclOperation
from tidelog.server.security.quota_manager import (
    UNBOUNDED_MUTATION_QUOTA,
    ControllerMutationQuota,
    ControllerMutationQuotaManager,
    ThrottlingQuotaExceededError,
)

__all__ = ["TopicsHandler", "auto_create_topic", "topic_name_error"]

_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
_MAX_TOPIC_LENGTH = 249
_MAX_PARTITIONS = 10_000


def topic_name_error(name: str | None) -> str | None:
    """Why ``name`` is not a legal topic name, or None if it is."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > _MAX_TOPIC_LENGTH:
        return f"Topic name is illegal, it can't be longer than {_MAX_TOPIC_LENGTH} characters"
    if not _LEGAL_TOPIC.fullmatch(name):
        return f"Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
    return None


def auto_create_topic(admin: TopicAdmin, name: str) -> TopicInfo | None:
    """Create ``name`` with the broker's defaults (Metadata's auto-creation); None while a cluster creates it."""
    config = admin.config
    return admin.ensure_topic(
        name, config.num_partitions, config.default_replication_factor, {}, is_internal=False
    )


class TopicsHandler:
    """CreateTopics, DeleteTopics and CreatePartitions through the topic admin (single node or cluster)."""

    def __init__(
        self,
        admin: TopicAdmin,
        metadata: MetadataCache,
        authz: Authz = None,
        *,
        mutation_quotas: ControllerMutationQuotaManager | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._admin = admin
        self._metadata = metadata
        self._authz = authz
        self._mutation_quotas = mutation_quotas
        self._clock = clock

    def _mutation_quota(self, ctx: RequestContext, strict_since: int) -> ControllerMutationQuota:
        if self._mutation_quotas is None:
            return UNBOUNDED_MUTATION_QUOTA
        return self._mutation_quotas.quota_for(
            ctx.principal.name,
            ctx.client_id or "",
            strict=ctx.api_version >= strict_since,
            clock=self._clock.now_ms,
        )

    async def create_topics(self, ctx: RequestContext, request: CreateTopicsRequest) -> CreateTopicsResponse:
        response = CreateTopicsResponse()
        quota = self._mutation_quota(ctx, strict_since=6)
        seen: set[str] = set()
        may_create_any = cluster_allowed(self._authz, ctx, AclOperation.CREATE)
        for wanted in request.topics:
            result = CreateTopicsResponse.CreatableTopicResult(name=wanted.name, configs=None)
            response.topics.append(result)
            if wanted.name in seen:
                result.error_code, result.error_message = ErrorCode.INVALID_REQUEST, "Duplicate topic name"
                continue
            seen.add(wanted.name)
            if not may_create_any and not topic_allowed(self._authz, ctx, AclOperation.CREATE, wanted.name):
                result.error_code, result.error_message = (
                    ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                    "Authorization failed.",
                )
                continue
            error = self._create_error(wanted)
            if error is not None:
                result.error_code, result.error_message = error
                result.topic_config_error_code = ErrorCode.NONE
                continue
            config = self._admin.config
            num_partitions = config.num_partitions if wanted.num_partitions == -1 else wanted.num_partitions
            replication = (
                config.default_replication_factor
                if wanted.replication_factor == -1
                else wanted.replication_factor
            )
            assignments = {a.partition_index: tuple(a.broker_ids) for a in wanted.assignments} or None
            if assignments:
                num_partitions = len(assignments)
                replication = len(next(iter(assignments.values())))
            configs = {c.name: c.value for c in wanted.configs if c.value is not None}
            result.num_partitions = num_partitions
            result.replication_factor = replication
            try:
                if request.validate_only:
                    self._admin.check_new_topic(num_partitions, replication, assignments)
                else:
                    self._admin.check_new_topic(num_partitions, replication, assignments)
                    quota.record(num_partitions)
                    topic = await self._admin.create_topic(
                        wanted.name,
                        num_partitions,
                        replication,
                        configs,
                        assignments=assignments,
                        timeout_ms=request.timeout_ms,
                    )
                    if topic is not None:
                        result.topic_id = topic.topic_id
                    elif request.timeout_ms > 0:
                        result.error_code = ErrorCode.REQUEST_TIMED_OUT
                        result.error_message = f"Topic '{wanted.name}' was created but is not ready yet."
            except AdminError as exc:
                result.error_code, result.error_message = exc.error_code, exc.message
                continue
            except ThrottlingQuotaExceededError as exc:
                result.error_code, result.error_message = ErrorCode.THROTTLING_QUOTA_EXCEEDED, str(exc)
                result.num_partitions = result.replication_factor = -1
                continue
            if ctx.api_version >= 5 and not topic_allowed(
                self._authz, ctx, AclOperation.DESCRIBE_CONFIGS, wanted.name
            ):
                result.topic_config_error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif ctx.api_version >= 5:
                result.configs = [
                    CreateTopicsResponse.CreatableTopicConfigs(
                        name=d.name,
                        value=d.value,
                        read_only=d.read_only,
                        config_source=int(d.source),
                        is_sensitive=d.is_sensitive,
                    )
                    for d in describe_topic_configs(config, configs)
                ]
        response.throttle_time_ms = quota.throttle_time_ms()
        return response

    def _create_error(self, wanted: CreateTopicsRequest.CreatableTopic) -> tuple[int, str] | None:
        name_error = topic_name_error(wanted.name)
        if name_error is not None:
            return ErrorCode.INVALID_TOPIC_EXCEPTION, name_error
        if wanted.name in self._metadata:
            return ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{wanted.name}' already exists."
        if wanted.assignments:
            if wanted.num_partitions != -1 or wanted.replication_factor != -1:
                return (
                    ErrorCode.INVALID_REQUEST,
                    "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time.",
                )
        else:
            if (
                wanted.num_partitions == 0
                or wanted.num_partitions < -1
                or wanted.num_partitions > _MAX_PARTITIONS
            ):
                return ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0."
            if wanted.replication_factor == 0 or wanted.replication_factor < -1:
                return ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0."
        try:
            validate_topic_configs({c.name: c.value for c in wanted.configs}, self._admin.config)
        except ConfigError as exc:
            return ErrorCode.INVALID_CONFIG, str(exc)
        return None

    async def delete_topics(self, ctx: RequestContext, request: DeleteTopicsRequest) -> DeleteTopicsResponse:
        response = DeleteTopicsResponse()
        quota = self._mutation_quota(ctx, strict_since=5)
        wanted: list[tuple[str | None, uuid.UUID | None]]
        if ctx.api_version >= 6:
            wanted = [(t.name, t.topic_id) for t in request.topics]
        else:
            wanted = [(name, None) for name in request.topic_names]
        for name, topic_id in wanted:
            if name is not None:
                topic = self._metadata.topic(name)
            else:
                topic = self._metadata.topic_by_id(topic_id) if topic_id is not None else None
            result = DeleteTopicsResponse.DeletableTopicResult(name=name)
            response.responses.append(result)
            if self._authz is not None and (topic is not None or name is not None):
                named = topic.name if topic is not None else name
                assert named is not None
                if name is None and not topic_allowed(self._authz, ctx, AclOperation.DESCRIBE, named):
                    assert topic_id is not None  # the topic id is no secret, its name is
                    result.topic_id = topic_id
                    result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    continue
                if not topic_allowed(self._authz, ctx, AclOperation.DELETE, named):
                    result.name = named
                    if topic is not None and name is None:
                        result.topic_id = topic.topic_id
                    result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    continue
            if topic is None:
                if name is None:
                    result.error_code = ErrorCode.UNKNOWN_TOPIC_ID
                    if topic_id is not None:
                        result.topic_id = topic_id
                else:
                    result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                result.error_message = "This server does not host this topic."
                continue
            result.name = topic.name
            result.topic_id = topic.topic_id
            if not self._admin.config.delete_topic_enable:
                result.error_code = ErrorCode.TOPIC_DELETION_DISABLED
                result.error_message = "Topic deletion is disabled (delete.topic.enable=false)."
                continue
            if topic.is_internal:
                result.error_code = ErrorCode.INVALID_TOPIC_EXCEPTION
                result.error_message = (
                    f"Topic {topic.name} is internal: the broker's coordinators keep their state in it"
                )
                continue
            try:
                quota.record(topic.num_partitions)
            except ThrottlingQuotaExceededError as exc:
                result.error_code, result.error_message = ErrorCode.THROTTLING_QUOTA_EXCEEDED, str(exc)
                continue
            if not await self._admin.delete_topic(topic.name, timeout_ms=request.timeout_ms):
                result.error_code = ErrorCode.REQUEST_TIMED_OUT
                result.error_message = f"Topic '{topic.name}' is marked for deletion but not deleted yet."
        response.throttle_time_ms = quota.throttle_time_ms()
        return response

    async def create_partitions(
        self, ctx: RequestContext, request: CreatePartitionsRequest
    ) -> CreatePartitionsResponse:
        response = CreatePartitionsResponse()
        quota = self._mutation_quota(ctx, strict_since=3)
        for wanted in request.topics:
            result = CreatePartitionsResponse.CreatePartitionsTopicResult(name=wanted.name)
            response.results.append(result)
            if not topic_allowed(self._authz, ctx, AclOperation.ALTER, wanted.name):
                result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                result.error_message = "The topic authorization is failed."
                continue
            topic = self._metadata.topic(wanted.name)
            if topic is None:
                result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                result.error_message = f"The topic '{wanted.name}' does not exist."
                continue
            if wanted.count <= topic.num_partitions:
                result.error_code = ErrorCode.INVALID_PARTITIONS
                result.error_message = (
                    f"Topic currently has {topic.num_partitions} partitions, which is higher than or equal to "
                    f"the requested {wanted.count}; partitions can only be added."
                )
                continue
            if wanted.count > _MAX_PARTITIONS:
                result.error_code = ErrorCode.INVALID_PARTITIONS
                result.error_message = f"Too many partitions: {wanted.count}"
                continue
            assignments = None
            if wanted.assignments is not None:
                if len(wanted.assignments) != wanted.count - topic.num_partitions:
                    result.error_code = ErrorCode.INVALID_REPLICA_ASSIGNMENT
                    result.error_message = (
                        "The number of assignments must equal the number of partitions added."
                    )
                    continue
                assignments = [tuple(a.broker_ids) for a in wanted.assignments]
            if request.validate_only:
                continue
            try:
                quota.record(wanted.count - topic.num_partitions)
            except ThrottlingQuotaExceededError as exc:
                result.error_code, result.error_message = ErrorCode.THROTTLING_QUOTA_EXCEEDED, str(exc)
                continue
            try:
                if not await self._admin.add_partitions(
                    wanted.name, wanted.count, assignments=assignments, timeout_ms=request.timeout_ms
                ):
                    result.error_code = ErrorCode.REQUEST_TIMED_OUT
                    result.error_message = (
                        f"The partitions of '{wanted.name}' were added but are not ready yet."
                    )
            except AdminError as exc:
                result.error_code, result.error_message = exc.error_code, exc.message
        response.throttle_time_ms = quota.throttle_time_ms()
        return response
