"""InitProducerId (key 22): producer ids and epochs for idempotent and transactional producers.

Invariants:

* Without a transactional id (an idempotent producer) the answer is always a *new* producer id with epoch 0,
  as Kafka's ``TransactionCoordinator.handleInitProducerId`` does, including for v3+ requests that carry
  the producer's current id and epoch (KIP-360): for a non-transactional producer the broker cannot tell
  that the requester owns that id, so it never bumps (or fences) someone else's epoch. Idempotent clients
  bump their epoch locally or take the new id; every partition accepts a new producer at any sequence.
* With a transactional id the request goes to the transaction coordinator
  (:class:`~tidelog.server.txn_runtime.TransactionRuntime`): epoch bump, fencing of the id's previous
  producer and the end of its unfinished transaction. With Enable2Pc (v6, KIP-939) the principal needs
  TWO_PHASE_COMMIT on the transactional id as well as WRITE.
* Ids come from :class:`~tidelog.server.producer_id_manager.ProducerIdManager`, reserved on disk first; if
  the block cannot be written the answer is the retriable ``COORDINATOR_LOAD_IN_PROGRESS`` (what Kafka
  answers while it has no block) and no id is handed out; so it is while ``__transaction_state`` still
  loads after a start (its producer ids are not in the floor yet), without an error logged.
"""

from __future__ import annotations

import logging

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import InitProducerIdRequest, InitProducerIdResponse
from tidelog.server.dispatch import Answer, RequestContext
from tidelog.server.producer_id_manager import ProducerIds, ProducerIdsNotReadyError
from tidelog.server.security.acl import AclOperation, ResourceType
from tidelog.server.txn_runtime import TransactionRuntime

from .authz import Authz, cluster_allowed, txn_allowed

__all__ = ["InitProducerIdHandler"]

log = logging.getLogger("tidelog.producer_id")


class InitProducerIdHandler:
    """InitProducerId: new ids from the producer id manager, transactional ids to the transaction runtime."""

    def __init__(
        self, producer_ids: ProducerIds, transactions: TransactionRuntime, authz: Authz = None
    ) -> None:
        self._producer_ids = producer_ids
        self._transactions = transactions
        self._authz = authz

    def handle(self, ctx: RequestContext, request: InitProducerIdRequest) -> Answer:
        if request.transactional_id is not None:
            if not txn_allowed(self._authz, ctx, AclOperation.WRITE, request.transactional_id) or (
                request.enable2_pc
                and not txn_allowed(self._authz, ctx, AclOperation.TWO_PHASE_COMMIT, request.transactional_id)
            ):
                return InitProducerIdResponse(
                    error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    producer_id=-1,
                    producer_epoch=-1,
                )
            return self._transactions.handle(ctx, request)
        if (
            self._authz is not None
            and not cluster_allowed(self._authz, ctx, AclOperation.IDEMPOTENT_WRITE)
            and not self._authz.permits_any(ctx, AclOperation.WRITE, ResourceType.TOPIC)
        ):  # Kafka 3's rule: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic
            return InitProducerIdResponse(
                error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, producer_id=-1, producer_epoch=-1
            )
        try:
            producer_id = self._producer_ids.generate_producer_id()
        except ProducerIdsNotReadyError as exc:
            log.debug("no producer id for client %s yet: %s", ctx.client_id, exc)
            return InitProducerIdResponse(
                error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, producer_id=-1, producer_epoch=-1
            )
        except OSError:
            log.exception("could not reserve a block of producer ids")
            return InitProducerIdResponse(
                error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, producer_id=-1, producer_epoch=-1
            )
        log.debug("producer id %d (epoch 0) for client %s", producer_id, ctx.client_id)
        return InitProducerIdResponse(error_code=ErrorCode.NONE, producer_id=producer_id, producer_epoch=0)
