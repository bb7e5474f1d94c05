"""Hostile-input suite: hypothesis settings. The default run is bounded (RECALL_FUZZ_EXAMPLES,
default 25 per property); `make fuzz` raises it for long runs."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

EXAMPLES = int(os.environ.get("RECALL_FUZZ_EXAMPLES", "25"))

#: Decorate a property with `@FUZZ`: bounded examples, no deadline (ingest does real I/O).
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])
