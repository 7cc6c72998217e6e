"""Settings of the transaction coordinator: Kafka's broker keys, snake_cased, with Kafka's defaults.

Invariants: attribute names equal the ``BrokerConfig`` attributes of the same Kafka keys
(``transaction.max.timeout.ms`` -> ``transaction_max_timeout_ms``), so the runtime builds this from
its broker config field by field; the coordinator reads nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TransactionCoordinatorConfig"]


@dataclass(frozen=True, slots=True)
class TransactionCoordinatorConfig:
    transaction_state_log_num_partitions: int = 50
    """``transaction.state.log.num.partitions``: a transactional id lives on ``partition_for(id, this)``."""
    transaction_max_timeout_ms: int = 900_000
    """``transaction.max.timeout.ms``: InitProducerId asking for more gets INVALID_TRANSACTION_TIMEOUT."""
    transaction_two_phase_commit_enable: bool = False
    """``transaction.two.phase.commit.enable`` (KIP-939): whether InitProducerId may ask for Enable2Pc."""
    transactional_id_expiration_ms: int = 604_800_000
    """``transactional.id.expiration.ms``: an id idle (no transaction in flight) this long is removed."""
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    """How often each partition looks for expired transactional ids."""
    offsets_topic_num_partitions: int = 50
    """``offsets.topic.num.partitions``: AddOffsetsToTxn adds ``__consumer_offsets-partition_for(group)``."""
