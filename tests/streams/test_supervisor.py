"""Unit: the worker supervisor's standbys wait at a lower CPU priority and take the
supervisor's back when they take over (no broker: the processes are small Python scripts)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from streams.kafka.supervisor import STANDBY_NICENESS, RoleSpec, Supervisor, priority_restorable

_STANDBY = """
import os, sys, time
from pathlib import Path
from streams.kafka.supervisor import restore_priority
out = Path(sys.argv[1])
out.write_text(f"waiting {os.getpriority(os.PRIO_PROCESS, 0)}\\n")
sys.stdin.readline()
restore_priority(int(os.environ["SUPERVISOR_PID"]))
out.write_text(out.read_text() + f"running {os.getpriority(os.PRIO_PROCESS, 0)}\\n")
time.sleep(30)
"""


def _lines(path: Path, count: int) -> list[str]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if path.exists() and len(lines := path.read_text().splitlines()) >= count:
            return lines
        time.sleep(0.05)
    raise AssertionError(f"{path}: {path.read_text() if path.exists() else 'nothing'}")


@pytest.mark.skipif(not priority_restorable(), reason="this user may not raise a priority back")
def test_a_standby_waits_at_a_lower_priority_and_takes_the_supervisors_when_it_runs(
        tmp_path: Path) -> None:
    out = tmp_path / "standby.txt"
    standby = [sys.executable, "-c", _STANDBY, str(out)]
    env = {**os.environ, "SUPERVISOR_PID": str(os.getpid()),
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    supervisor = Supervisor({"r": RoleSpec([sys.executable, "-c", "import time; time.sleep(30)"],
                                           standby=standby, handoff=b"go\n")}, env)
    assert supervisor.ease_standbys
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    role = supervisor.roles["r"]
    role.standby = supervisor._spawn(standby, standby=True)
    try:
        assert _lines(out, 1) == [f"waiting {min(19, ours + STANDBY_NICENESS)}"]
        supervisor._start(role)  # the standby takes over the role
        assert role.process is not None and _lines(out, 2)[1] == f"running {ours}"
    finally:
        for process in (role.process, role.standby):
            if process is not None:
                process.kill()
                process.wait()
