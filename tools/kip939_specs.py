"""InitProducerId v6 (KIP-939, two-phase commit), for ``gen_messages.py`` while the reference specs lack it.

``../shared/reference/kafka-message-specs`` stops at InitProducerId v5. Kafka 4.1 adds v6
(``clients/src/main/resources/common/message/InitProducerId{Request,Response}.json`` in apache/kafka):

- request: ``Enable2Pc`` (bool, 6+, default false) and ``KeepPreparedTxn`` (bool, 6+, default false),
  after ``ProducerEpoch``;
- response: ``OngoingTxnProducerId`` (int64, 6+, default -1) and ``OngoingTxnProducerEpoch`` (int16, 6+,
  default -1), after ``ProducerEpoch``.

:func:`apply` adds those fields and widens ``validVersions`` to 0-6 only when the loaded spec still stops
at v5, so the day the reference has Kafka's files they win and this module can go.
"""

from __future__ import annotations

from typing import Any

__all__ = ["apply"]

_ADDED: dict[str, list[dict[str, Any]]] = {
    "InitProducerIdRequest": [
        {
            "name": "Enable2Pc",
            "type": "bool",
            "versions": "6+",
            "default": "false",
            "about": "True if the client wants to enable two-phase commit (2PC) protocol for transactions.",
        },
        {
            "name": "KeepPreparedTxn",
            "type": "bool",
            "versions": "6+",
            "default": "false",
            "about": "True if the client wants to keep the currently ongoing transaction instead of aborting it.",
        },
    ],
    "InitProducerIdResponse": [
        {
            "name": "OngoingTxnProducerId",
            "type": "int64",
            "versions": "6+",
            "default": "-1",
            "entityType": "producerId",
            "about": "The producer id for ongoing transaction when KeepPreparedTxn is used, -1 if there is "
            "no transaction ongoing.",
        },
        {
            "name": "OngoingTxnProducerEpoch",
            "type": "int16",
            "versions": "6+",
            "default": "-1",
            "about": "The epoch associated with the producer id for ongoing transaction when "
            "KeepPreparedTxn is used, -1 if there is no transaction ongoing.",
        },
    ],
}


def apply(specs: dict[str, dict[str, Any]]) -> None:
    """Give InitProducerId v6 to ``specs`` (file name -> spec, changed in place) if it stops at v5."""
    for spec in specs.values():
        added = _ADDED.get(spec.get("name", ""))
        if added is None or spec.get("validVersions") != "0-5":
            continue
        spec["validVersions"] = "0-6"
        spec["fields"].extend(dict(f) for f in added)
