"""What ``brokers list`` merges (no broker): who is alive, from which source, and the partitions each broker
leads, hosts and lags on."""

from __future__ import annotations

from tidelog.cli._brokers_view import (
    BrokerEndpoint,
    PartitionState,
    RegisteredBroker,
    WireSnapshot,
    ZkSnapshot,
    build_view,
    view_json,
)

PARTITIONS = [
    PartitionState("orders", 1, 2, (2, 3, 1), (2, 3)),
    PartitionState("orders", 0, 1, (1, 2, 3), (1, 2)),
    PartitionState("__consumer_offsets", 0, -1, (3,), (3,)),
]
WIRE = WireSnapshot(
    cluster_id="c1",
    controller_id=1,
    brokers=[
        RegisteredBroker(2, (BrokerEndpoint("h2", 9093),), "r2"),
        RegisteredBroker(1, (BrokerEndpoint("h1", 9092),), None),
    ],
    partitions=PARTITIONS,
)


def test_from_the_wire_a_broker_named_only_by_replica_lists_is_not_alive() -> None:
    view = build_view(WIRE)
    assert (view.cluster_id, view.controller_id, view.controller_epoch, view.from_zookeeper) == (
        "c1",
        1,
        None,
        False,
    )
    rows = {row.broker_id: row for row in view.brokers}
    assert sorted(rows) == [1, 2, 3]
    assert [(r.alive, r.is_controller, r.rack, r.broker_epoch) for r in view.brokers] == [
        (True, True, None, None),
        (True, False, "r2", None),
        (False, False, None, None),
    ]
    assert rows[1].leader_of == ("orders-0",)
    assert rows[2].leader_of == ("orders-1",)
    assert rows[3].leader_of == ()  # offline partitions (leader -1) count for nobody
    assert rows[3].replica_of == ("__consumer_offsets-0", "orders-0", "orders-1")
    assert rows[3].out_of_isr == ("orders-0",)
    assert rows[1].out_of_isr == ("orders-1",)
    assert rows[2].endpoints[0].text() == "h2:9093"


def test_zookeeper_decides_who_is_alive_and_gives_epochs_and_named_listeners() -> None:
    zk = ZkSnapshot(
        brokers=[
            RegisteredBroker(
                3, (BrokerEndpoint("::1", 9094, "INTERNAL", "PLAINTEXT"),), "r3", broker_epoch=77
            ),
            RegisteredBroker(
                2, (BrokerEndpoint("h2", 9093, "PLAINTEXT", "PLAINTEXT"),), "r2", broker_epoch=55
            ),
        ],
        controller_id=3,
        controller_epoch=4,
    )
    view = build_view(WIRE, zk)
    document = view_json(view)
    assert (document["controller_id"], document["controller_epoch"], document["source"]) == (
        3,
        4,
        "zookeeper",
    )
    assert [(b["id"], b["alive"], b["controller"], b["broker_epoch"]) for b in document["brokers"]] == [
        (1, False, False, None),  # the wire still listed it; its registration is gone
        (2, True, False, 55),
        (3, True, True, 77),
    ]
    assert view.brokers[2].endpoints[0].text() == "INTERNAL://[::1]:9094"
    assert document["brokers"][2]["endpoints"] == [
        {"listener": "INTERNAL", "security_protocol": "PLAINTEXT", "host": "::1", "port": 9094}
    ]
    assert document["brokers"][0]["leader_partitions"] == ["orders-0"]  # Metadata's view, until it moves
