"""The worker's supervisor: a taken standby is replaced only after STANDBY_RESPAWN_S (its
imports must not compete with the work that took the last one), and not while a role's next
process (a reindex's fold) runs beside it."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator

import pytest

from streams.runtime.kafka import supervisor as sv

#: A process that waits (a role), and one that waits for its handoff line first (a standby).
ROLE = [sys.executable, "-c", "import time; time.sleep(60)"]
STANDBY = [sys.executable, "-c", "import sys, time; sys.stdin.readline(); time.sleep(60)"]


@pytest.fixture
def supervisor() -> Iterator[sv.Supervisor]:
    """A supervisor of one fold role with a warm standby (nothing started yet)."""
    made = sv.Supervisor({"fold": sv.RoleSpec(ROLE, standby=STANDBY, handoff=b"1\n")},
                         dict(os.environ))
    try:
        yield made
    finally:
        made._stop_all()


def test_a_taken_standby_is_replaced_only_when_its_delay_is_over(
        monkeypatch: pytest.MonkeyPatch, supervisor: sv.Supervisor) -> None:
    monkeypatch.setattr(sv, "STANDBY_RESPAWN_S", 0.6)
    fold = supervisor.roles["fold"]
    supervisor._start(fold)  # a first start: the standby is started at once
    first = fold.standby
    assert first is not None and first.poll() is None
    supervisor.start_next("fold", [*ROLE, "next"], b"2\n")  # the next fold takes it
    assert supervisor.roles[sv.next_name("fold")].process is first
    # no standby is started while the next process runs beside the role (a build)
    assert fold.standby is None and fold.standby_due is None
    time.sleep(0.7)
    supervisor._tend()
    assert fold.standby is None
    supervisor.replace("fold", [*ROLE, "next"], b"2\n")  # the swap: the next one takes over
    assert fold.process is first and sv.next_name("fold") not in supervisor.roles
    assert fold.standby is None and fold.standby_due is not None
    supervisor._tend()
    assert fold.standby is None  # not yet: the standby's start waits
    time.sleep(0.7)
    supervisor._tend()
    assert fold.standby is not None and fold.standby.poll() is None
    assert fold.standby_due is None
    # a role that dies takes the new standby; the next one waits again
    taken = fold.standby
    assert fold.process is not None
    fold.process.kill()
    fold.process.wait()
    supervisor._tend()  # the death is seen (restarted after the back-off)
    fold.due = 0.0
    supervisor._tend()
    assert fold.process is taken and fold.standby is None


def test_a_dropped_next_process_brings_the_standby_back_after_its_delay(
        monkeypatch: pytest.MonkeyPatch, supervisor: sv.Supervisor) -> None:
    monkeypatch.setattr(sv, "STANDBY_RESPAWN_S", 0.3)
    fold = supervisor.roles["fold"]
    supervisor._start(fold)
    first = fold.standby
    supervisor.start_next("fold", [*ROLE, "next"], b"2\n")
    supervisor.drop_next("fold")  # a reindex that failed: its fold is stopped
    assert sv.next_name("fold") not in supervisor.roles
    assert first is not None and first.wait(10) is not None  # told to stop (SIGTERM)
    assert fold.standby is None and fold.standby_due is not None
    time.sleep(0.4)
    supervisor._tend()
    assert fold.standby is not None and fold.standby.poll() is None
