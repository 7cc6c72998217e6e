"""The cluster's ZooKeeper client: Kafka's ``KafkaZkClient`` and ``ZkData`` (apache/kafka 3.3) over kazoo,
for the asyncio broker.

- :mod:`.paths`: Kafka's znode layout (``/brokers/ids/N``, ``/controller``, ``/controller_epoch``,
  ``/brokers/topics/T/partitions/P/state``, ``/latest_producer_id_block``, ``/config/...``, ``/admin/...``).
- :mod:`.zk_data`: the JSON in those znodes as typed records and pure codecs.
- :mod:`.session`: one kazoo session bridged to the event loop (retry after a lost connection, watches and
  session expiry delivered on the loop, chroot created if missing).
- :mod:`.client`: the operations: broker registration (broker epoch = czxid), controller election and
  fenced controller writes, conditional partition-state writes, topics, producer-id blocks, configs and
  their change notifications, topic deletion markers, the cluster id.
- :mod:`.errors`: typed outcomes (:class:`ControllerMovedError`, :class:`BadVersion`, ...).
"""

from tidelog.server.zk.client import (
    INITIAL_CONTROLLER_EPOCH,
    ControllerEpoch,
    KafkaZkClient,
    LiveBroker,
    UpdateLeaderAndIsrResult,
)
from tidelog.server.zk.errors import (
    BadVersion,
    BrokerIdInUseError,
    ControllerMovedError,
    TopicAlreadyMarkedForDeletionError,
    TopicExistsError,
    ZkError,
    ZkSessionExpiredError,
)
from tidelog.server.zk.session import SessionState, Watch, ZkSession, parse_connect_string
from tidelog.server.zk.zk_data import (
    NO_LEADER,
    PRODUCER_ID_BLOCK_SIZE,
    BrokerRegistration,
    ControllerRegistration,
    Endpoint,
    LeaderAndIsr,
    ProducerIdBlock,
    ReplicaAssignment,
    TopicAssignment,
    ZkDataError,
)

__all__ = [
    "INITIAL_CONTROLLER_EPOCH",
    "NO_LEADER",
    "PRODUCER_ID_BLOCK_SIZE",
    "BadVersion",
    "BrokerIdInUseError",
    "BrokerRegistration",
    "ControllerEpoch",
    "ControllerMovedError",
    "ControllerRegistration",
    "Endpoint",
    "KafkaZkClient",
    "LeaderAndIsr",
    "LiveBroker",
    "ProducerIdBlock",
    "ReplicaAssignment",
    "SessionState",
    "TopicAlreadyMarkedForDeletionError",
    "TopicAssignment",
    "TopicExistsError",
    "UpdateLeaderAndIsrResult",
    "Watch",
    "ZkDataError",
    "ZkError",
    "ZkSession",
    "ZkSessionExpiredError",
    "parse_connect_string",
]
