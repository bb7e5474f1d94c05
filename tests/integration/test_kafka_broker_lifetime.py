"""A test broker's JVM does not outlive the test process that started it: it runs in a session of
its own, so killing pytest (SIGKILL, an OOM kill, a CI timeout) used to leave it running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.apache_kafka import ROOT

pytestmark = [pytest.mark.kafka,
              pytest.mark.skipif(not sys.platform.startswith("linux"),
                                 reason="the parent-death signal is Linux's")]

#: A stand-in for a test session: starts one node, says its JVM's pid, then waits to be killed.
LAUNCHER = """
import sys, time
from pathlib import Path
from tests.integration.apache_kafka import start_cluster
cluster = start_cluster(Path(sys.argv[1]), 1)
print(cluster.process.pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"  # a zombie has exited (its reaper may not have run yet)


def test_the_broker_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(tmp_path / "kafka")],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    jvm = 0
    try:
        assert launcher.stdout is not None
        line = launcher.stdout.readline().strip()
        assert line.isdigit(), f"the launcher did not start a node: {launcher.stderr.read()!r}"
        jvm = int(line)
        assert _alive(jvm)
        launcher.kill()
        launcher.wait(timeout=10)
        deadline = time.monotonic() + 5
        while _alive(jvm) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(jvm), f"broker JVM {jvm} outlived the killed process that started it"
    finally:
        if launcher.poll() is None:
            launcher.kill()
        if jvm and _alive(jvm):
            os.kill(jvm, signal.SIGKILL)
