"""Transport: `recall worker` as a supervisor — one process per role, a dead role restarted.

The roles (fold, index, query) run as separate processes so that they overlap on separate cores
(one process shared one GIL: fold, index, faust's consumer thread and the pollers). The
supervisor only starts, watches, replaces and stops them:
- a role that dies (a crash, kill -9, any exit it was not asked for) is started again after a
  back-off that doubles from `BACKOFF_S` up to `BACKOFF_MAX_S` while it keeps dying quickly
  (`RESTART` as exit code: at once);
- a role may keep a warm standby (`standby=` command: a process that loads everything, then
  waits for one line on its stdin saying what to run): a dead role is replaced by its standby,
  and a new standby is started behind it `STANDBY_RESPAWN_S` later, so a restart costs no
  process start and the new standby's imports do not compete with the work that took the
  last one (a reindex's last indexing, a replay);
- `replace(role, command, handoff)` runs the role as `command` from now on (the standby gets
  `handoff`, or `command` is started), and only then stops the old process (SIGTERM): two
  processes of a role may overlap while the old one winds down;
- `start_next(role, command, handoff)` runs a role's next process beside it (by the standby,
  kept running like a role; a later `replace(role, command)` makes it the role's process,
  `drop_next(role)` stops it): the fold of the generation a reindex is building;
- `notify(roles)` sends SIGUSR1 to those roles' processes (a role handles it once it called
  `ready_for_notices`; until then it stays pending);
- SIGTERM/SIGINT stop every process (SIGTERM, then SIGKILL after `STOP_GRACE_S`) and then the
  supervisor; a supervisor killed with kill -9 takes its roles with it (Linux parent-death
  signal; elsewhere each role notices its parent is gone within a second).
Calls from other threads are queued and run by the supervisor's loop (`call_soon`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

log = logging.getLogger("recall.supervisor")

#: Exit code of a role that asks to be started again now.
RESTART = 75
BACKOFF_S = 0.5
BACKOFF_MAX_S = 15.0
#: A role that stayed up this long is healthy again: its next death restarts without delay.
HEALTHY_AFTER_S = 30.0
STOP_GRACE_S = 20.0
#: The longest the loop sleeps with nothing due: a process's exit wakes it at once (a thread
#: per process waits for it), so this only bounds how late something unforeseen is noticed.
POLL_S = 2.0
#: A standby taken is replaced this much later: its start (Python, faust, aiokafka imports,
#: seconds of CPU) came exactly when the index role finished a reindex's new generation or a
#: replay began, on two cores shared with the broker. A role that dies within this time starts
#: cold (about as long as those imports) instead.
STANDBY_RESPAWN_S = 5.0
_PR_SET_NAME = 15
_PR_SET_PDEATHSIG = 1


def name_process(name: str) -> None:
    """Show this process as `name` (at most 15 bytes) in ps/top, e.g. `recall-fold-g2` (Linux)."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)
        except (OSError, AttributeError):
            pass


def _prepare_child() -> None:
    """In a role process before exec: SIGUSR1 stays pending until the role is ready for it
    (`ready_for_notices`), and the process dies with the supervisor."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    die_with_parent()


def ready_for_notices(handler: Callable[[], None],
                      loop: asyncio.AbstractEventLoop | None = None) -> None:
    """In a role process: call `handler` on SIGUSR1 from now on, in `loop` if given (one that
    came earlier is delivered now)."""
    if loop is not None:
        loop.add_signal_handler(signal.SIGUSR1, handler)
    else:
        signal.signal(signal.SIGUSR1, lambda *_: handler())
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})


def die_with_parent() -> None:
    """The kernel kills this process when its parent (the supervisor) dies."""
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
    """One role: its command (and the standby's handoff that means the same), its process, its
    warm standby if it keeps one, its history."""

    name: str
    command: list[str]
    handoff: bytes | None = None
    standby_command: list[str] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None
    standby: subprocess.Popen[bytes] | None = None
    #: When the next standby is due (monotonic), None: none is waiting to be started.
    standby_due: float | None = None
    started: float = 0.0
    restarts: int = 0
    backoff: float = BACKOFF_S
    due: float = 0.0
    exits: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class RoleSpec:
    """How to run a role: its command; optionally a standby command and the line that makes
    a standby do what `command` does."""

    command: Sequence[str]
    standby: Sequence[str] = ()
    handoff: bytes | None = None


def next_name(role: str) -> str:
    """The name under which role `role`'s next process runs (Supervisor.start_next)."""
    return f"{role}.next"


class Supervisor:
    """Starts one process per role and keeps each running until told to stop."""

    def __init__(self, specs: Mapping[str, RoleSpec], env: Mapping[str, str]) -> None:
        self.roles = {name: Role(name, list(spec.command), spec.handoff, list(spec.standby))
                      for name, spec in specs.items()}
        self.env = dict(env)
        self.stopping = False
        #: Processes replaced and told to stop, until they exit (killed after STOP_GRACE_S).
        self.retiring: list[tuple[subprocess.Popen[bytes], float]] = []
        self._calls: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()

    def stop(self, *_: object) -> None:
        self.stopping = True
        self._calls.put(lambda: None)

    def call_soon(self, call: Callable[[], None]) -> None:
        """Run `call` in the supervisor's loop (from any thread)."""
        self._calls.put(call)

    def run(self) -> int:
        """Until SIGTERM/SIGINT; returns the exit code (0 after a clean stop)."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self.stop)
        try:
            for role in self.roles.values():
                self._start(role)
                self._keep_standby(role)
            while not self.stopping:
                with contextlib.suppress(queue.Empty):
                    self._calls.get(timeout=self._until_due())()
                self._tend()
        finally:
            self._stop_all()
        return 0

    # --- what other threads ask for (through call_soon) --------------------------------------

    def replace(self, name: str, command: Sequence[str], handoff: bytes | None = None) -> None:
        """Run role `name` as `command` (a standby: as `handoff`) from now on: the new process
        takes over first (the role's next process if it runs `command`: see `start_next`),
        then the old one is told to stop."""
        role = self.roles[name]
        old = role.process
        role.command, role.handoff = list(command), handoff
        upcoming = self.roles.get(next_name(name))
        if upcoming is not None and upcoming.command == role.command:
            del self.roles[upcoming.name]
            role.process, role.started, role.due = (upcoming.process, upcoming.started,
                                                    upcoming.due)
            log.warning("role %s: its next process (pid %s) took over", name,
                        upcoming.process.pid if upcoming.process else None)
            self._keep_standby(role, STANDBY_RESPAWN_S)
        else:
            self.drop_next(name)
            self._start(role)
        self._retire(old)

    def start_next(self, name: str, command: Sequence[str], handoff: bytes | None = None) -> None:
        """Run `command` beside role `name` as its next process (kept running and restarted
        like a role) until `replace(name, command)` makes it the role's process or `drop_next`
        stops it: a fold of the generation being built, so that the swap costs no start. It
        takes the role's warm standby if there is one; the next standby is started
        `STANDBY_RESPAWN_S` after the next process took over or was dropped, not while it runs
        beside the role (its imports would land in the middle of the reindex's build; the role
        dying meanwhile starts cold)."""
        upcoming = self.roles.get(next_name(name))
        if upcoming is not None and upcoming.command == list(command):
            return
        self.drop_next(name)
        role = self.roles[name]
        upcoming = Role(next_name(name), list(command), handoff)
        upcoming.standby, role.standby = role.standby, None
        self.roles[upcoming.name] = upcoming
        self._start(upcoming)
        role.standby_due = None

    def drop_next(self, name: str) -> None:
        """Stop role `name`'s next process, if it has one."""
        upcoming = self.roles.pop(next_name(name), None)
        if upcoming is not None:
            self._retire(upcoming.process)
            self._retire(upcoming.standby)
            if name in self.roles:
                self._keep_standby(self.roles[name], STANDBY_RESPAWN_S)

    def _retire(self, process: subprocess.Popen[bytes] | None) -> None:
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            self.retiring.append((process, time.monotonic() + STOP_GRACE_S))

    def notify(self, names: Sequence[str]) -> None:
        """SIGUSR1 to these roles' running processes (not standbys: that would start them)."""
        for name in names:
            role = self.roles.get(name)
            if role is not None and role.process is not None and role.process.poll() is None:
                role.process.send_signal(signal.SIGUSR1)

    # --- the loop ------------------------------------------------------------------------------

    def _spawn(self, command: Sequence[str], *, standby: bool = False) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(list(command), env=self.env, preexec_fn=_prepare_child,
                                   stdin=subprocess.PIPE if standby else subprocess.DEVNULL)
        # Its exit wakes the loop (which otherwise sleeps until something is due): an idle
        # supervisor polls nothing. (While this thread waits, `poll()` elsewhere answers
        # None, which is true until the exit, and the exit then sets the return code.)
        threading.Thread(target=self._woken_by_exit, args=(process,), daemon=True,
                         name=f"recall-exit-{process.pid}").start()
        return process

    def _woken_by_exit(self, process: subprocess.Popen[bytes]) -> None:
        process.wait()
        self.call_soon(lambda: None)

    def _until_due(self) -> float:
        """Seconds until `_tend` has something to do on its own (a restart's backoff, a
        standby's start, a retiring process's grace), at most POLL_S."""
        now = time.monotonic()
        dues = [role.due for role in self.roles.values() if role.process is None]
        dues += [role.standby_due for role in self.roles.values()
                 if role.standby_due is not None]
        dues += [deadline for _, deadline in self.retiring]
        return min([POLL_S, *(max(0.0, due - now) for due in dues)])

    def _start(self, role: Role) -> None:
        """Run the role: by its standby if it has a live one (then start the next standby),
        else by starting its command."""
        standby = role.standby
        role.standby = None
        if standby is not None and role.handoff is not None and standby.poll() is None:
            try:
                assert standby.stdin is not None
                standby.stdin.write(role.handoff)
                standby.stdin.close()
            except OSError:
                standby.kill()
            else:
                role.process, role.started = standby, time.monotonic()
                log.warning("role %s: standby (pid %s) took over", role.name, standby.pid)
                self._keep_standby(role, STANDBY_RESPAWN_S)
                return
        elif standby is not None and standby.poll() is None:
            standby.kill()
        role.process = self._spawn(role.command)
        role.started = time.monotonic()
        log.info("role %s started (pid %s)", role.name, role.process.pid)
        self._keep_standby(role)

    def _keep_standby(self, role: Role, delay: float = 0.0) -> None:
        """Start the role's standby if it keeps one and has none running: now, or `delay`
        seconds from now (`_tend` starts it when due)."""
        if not role.standby_command or (role.standby is not None
                                        and role.standby.poll() is None):
            return
        now = time.monotonic()
        due = now + delay if role.standby_due is None else min(role.standby_due, now + delay)
        if due > now:
            role.standby_due = due
            return
        role.standby_due = None
        role.standby = self._spawn(role.standby_command, standby=True)

    def _tend(self) -> None:
        now = time.monotonic()
        for role in self.roles.values():
            if self.stopping:
                return
            if role.standby is not None and role.standby.poll() is not None:
                log.error("role %s: standby exited with %s; starting another", role.name,
                          role.standby.returncode)
                self._keep_standby(role)
            elif role.standby_due is not None and now >= role.standby_due:
                self._keep_standby(role)
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
                log.warning("role %s asked to be restarted", role.name)
                role.due = now
                continue
            if now - role.started >= HEALTHY_AFTER_S:
                role.backoff = BACKOFF_S
            role.due = now + role.backoff
            log.error("role %s exited with %s; restarting in %.1f s", role.name, code,
                      role.backoff)
            role.backoff = min(BACKOFF_MAX_S, role.backoff * 2)
        still = []
        for process, deadline in self.retiring:
            if process.poll() is None:
                if now > deadline:
                    process.kill()
                still.append((process, deadline))
        self.retiring = still

    def _stop_all(self) -> None:
        running = [p for r in self.roles.values() for p in (r.process, r.standby)
                   if p is not None and p.poll() is None]
        running += [p for p, _ in self.retiring if p.poll() is None]
        for process in running:
            process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for process in running:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
