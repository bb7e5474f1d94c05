"""Transport: `recall worker` as a supervisor — one process per role, a dead role restarted.

The roles (fold, index, query) run as separate processes so that they overlap on separate cores
(one process shared one GIL: fold, index, faust's consumer thread and the pollers). The
supervisor only starts, watches and stops them:
- a role that exits with `RESTART` (its generation changed) is started again at once;
- a role that dies any other way (a crash, kill -9) is started again after a back-off that
  doubles from `BACKOFF_S` up to `BACKOFF_MAX_S` while it keeps dying quickly;
- SIGTERM/SIGINT stop every role (SIGTERM, then SIGKILL after `STOP_GRACE_S`) and then the
  supervisor; a supervisor killed with kill -9 takes its roles with it (Linux parent-death
  signal; elsewhere each role notices its parent is gone within a second).
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

log = logging.getLogger("recall.supervisor")

#: Exit code of a role that asks to be started again now (its generation changed).
RESTART = 75
BACKOFF_S = 0.5
BACKOFF_MAX_S = 15.0
#: A role that stayed up this long is healthy again: its next death restarts without delay.
HEALTHY_AFTER_S = 30.0
STOP_GRACE_S = 20.0
POLL_S = 0.2
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In a role process before exec: the kernel kills it when the supervisor dies."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass


def watch_parent(parent: int, on_orphaned: Callable[[], None]) -> None:
    """In a role process: call `on_orphaned` once the supervisor is gone (the portable
    fallback of the parent-death signal; also covers a parent that died before prctl)."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        on_orphaned()

    threading.Thread(target=watch, name="recall-parent-watch", daemon=True).start()


@dataclass
class Role:
    """One role process and its restart history."""

    name: str
    command: list[str]
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    restarts: int = 0
    backoff: float = BACKOFF_S
    due: float = 0.0
    exits: list[int] = field(default_factory=list)


class Supervisor:
    """Starts one process per role and keeps each running until told to stop."""

    def __init__(self, commands: Mapping[str, Sequence[str]], env: Mapping[str, str]) -> None:
        self.roles = {name: Role(name, list(command)) for name, command in commands.items()}
        self.env = dict(env)
        self.stopping = False

    def stop(self, *_: object) -> None:
        self.stopping = True

    def run(self) -> int:
        """Until SIGTERM/SIGINT; returns the exit code (0 after a clean stop)."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self.stop)
        try:
            for role in self.roles.values():
                self._start(role)
            while not self.stopping:
                time.sleep(POLL_S)
                self._tend()
        finally:
            self._stop_all()
        return 0

    def _start(self, role: Role) -> None:
        role.process = subprocess.Popen(role.command, env=self.env, preexec_fn=die_with_parent,
                                        stdin=subprocess.DEVNULL)
        role.started = time.monotonic()
        log.info("role %s started (pid %s)", role.name, role.process.pid)

    def _tend(self) -> None:
        now = time.monotonic()
        for role in self.roles.values():
            if self.stopping:
                return
            if role.process is None:
                if now >= role.due:
                    self._start(role)
                continue
            code = role.process.poll()
            if code is None:
                continue
            role.exits.append(code)
            role.restarts += 1
            role.process = None
            if code == RESTART:
                log.warning("role %s restarts into the fleet's new generation", role.name)
                role.due = now
                continue
            if now - role.started >= HEALTHY_AFTER_S:
                role.backoff = BACKOFF_S
            role.due = now + role.backoff
            log.error("role %s exited with %s; restarting in %.1f s", role.name, code,
                      role.backoff)
            role.backoff = min(BACKOFF_MAX_S, role.backoff * 2)

    def _stop_all(self) -> None:
        running = [r.process for r in self.roles.values()
                   if r.process is not None and r.process.poll() is None]
        for process in running:
            process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for process in running:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
