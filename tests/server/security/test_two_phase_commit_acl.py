"""KIP-939 at the InitProducerId handler, in process, through the dispatcher's route:

- with ``transaction.two.phase.commit.enable`` and ACLs on, Enable2Pc needs TWO_PHASE_COMMIT on the
  transactional id besides WRITE (TRANSACTIONAL_ID_AUTHORIZATION_FAILED without it); a plain
  InitProducerId needs only WRITE (the coordinator runtime does not run here: a request past
  authorization gets NOT_COORDINATOR);
- with the setting off (the default, no ACLs), Enable2Pc is refused with
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED while a plain InitProducerId gets past.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tests.server.inprocess import ctx, handle, make_broker

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import ApiKey, InitProducerIdRequest
from tidelog.server.broker import Broker
from tidelog.server.dispatch import KafkaPrincipal
from tidelog.server.security.acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType

DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
PASSED = ErrorCode.NOT_COORDINATOR
"""What the transaction runtime answers here (its partitions are not loaded in this broker)."""


def init_error(broker: Broker, enable_2pc: bool) -> int:
    request = InitProducerIdRequest(
        transactional_id="tpc", transaction_timeout_ms=60_000, enable2_pc=enable_2pc
    )
    context = dataclasses.replace(ctx(ApiKey.INIT_PRODUCER_ID, 6), principal=KafkaPrincipal("User", "dave"))
    answer = handle(broker, context, request)
    assert not hasattr(answer, "__await__")  # refused or routed at once
    return int(answer.error_code)


def test_enable_2pc_is_refused_while_the_setting_is_off(tmp_path: Path) -> None:
    broker = make_broker(tmp_path / "data")
    try:
        assert (init_error(broker, False), init_error(broker, True)) == (PASSED, DENIED)
    finally:
        broker.logs.shutdown(broker.clock.now_ms())


def test_enable_2pc_needs_two_phase_commit_on_the_transactional_id(tmp_path: Path) -> None:
    broker = make_broker(
        tmp_path / "data",
        **{"authorizer.class.name": "tidelog", "transaction.two.phase.commit.enable": "true"},
    )
    try:
        assert broker.acls is not None

        def error(enable_2pc: bool) -> int:
            return init_error(broker, enable_2pc)

        def allow(operation: AclOperation) -> None:
            binding = AclBinding(
                ResourceType.TRANSACTIONAL_ID,
                "tpc",
                PatternType.LITERAL,
                "User:dave",
                "*",
                operation,
                AclPermissionType.ALLOW,
            )
            broker.acls.authorizer.add([binding])  # type: ignore[union-attr]

        assert (error(False), error(True)) == (DENIED, DENIED)
        allow(AclOperation.WRITE)
        assert (error(False), error(True)) == (PASSED, DENIED)
        allow(AclOperation.TWO_PHASE_COMMIT)
        assert error(True) == PASSED
    finally:
        broker.logs.shutdown(broker.clock.now_ms())
