"""Shared pytest setup: hypothesis profiles.

``HYPOTHESIS_PROFILE`` selects one: ``default`` (quick, used by ``make test``), ``thorough``
(many more examples, for local soak runs). Tests that need fewer examples than the profile set
``max_examples`` themselves.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "default",
    deadline=None,
    max_examples=100,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("thorough", parent=settings.get_profile("default"), max_examples=2000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
