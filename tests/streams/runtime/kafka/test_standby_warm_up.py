"""A standby fold has imported what its fold app needs (faust's app machinery, the fold agent
and the redactor's detectors) before it waits to be told its generation, so its takeover, at a
reindex's end, does not spend those imports' CPU beside the index role. Run in a fresh
interpreter: this test process has imported everything long before."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
from streams.core.settings import Settings
from streams.runtime.kafka import worker

WANTED = ("faust.app", "faust.worker", "streams.runtime.kafka.agents", "detect_secrets")

def told() -> int:
    missing = [name for name in WANTED if name not in sys.modules]
    print("missing:", missing)
    raise SystemExit(3 if missing else 0)

worker._await_generation = told
worker._run_fold(Settings(broker="kafka://127.0.0.1:9", data_dir=sys.argv[1]), "warning", None,
                 standby=True)
"""


def test_a_standby_has_imported_its_fold_app_before_it_is_told_its_generation(tmp_path) -> None:
    done = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "missing: []" in done.stdout
