"""Public facade over the generated Kafka message classes.

Invariants: one class per message (``ProduceRequest``, ``FetchResponse`` ...), versions carried as
data; nested structs are classes nested in their message (``ProduceRequest.TopicProduceData``);
field names are the specs' names in snake_case with the specs' defaults. ``REQUEST_TYPES`` /
``RESPONSE_TYPES`` map api keys to classes; ``ApiKey`` names them. Everything here is re-exported
from ``tidelog.protocol._generated.messages`` (regenerate with ``tools/gen_messages.py``).
"""

from __future__ import annotations

from tidelog.protocol._generated import messages as _generated
from tidelog.protocol._generated.messages import *  # noqa: F403  (exactly the generated __all__)

__all__ = _generated.__all__
