"""Ingest edge: derive native `turn`/`step` numbers (and each step's `step/start`) for foreign logs."""

from __future__ import annotations


class TurnClock:
    """A turn starts at the person's prompt (or an explicit turn marker); a step is one model
    response. Both count from 0, so an excerpt that starts mid-turn still gets turn 0.

    `open_step()` says when a `step/start` is due: once per (turn, step), before the step's
    first event (the prompt for a turn's first step, else the model's first record), so the
    current-session clamp of PROTOCOL §6.2 finds the running step in imported logs too."""

    def __init__(self) -> None:
        self.turn = 0
        self.step = 0
        self._used = False
        self._step_used = False
        self._message: str | None = None
        self._opened: tuple[int, int] | None = None

    def start_turn(self) -> None:
        """An explicit turn boundary; a no-op while the current turn has seen nothing."""
        if self._used:
            self.turn += 1
            self.step = 0
            self._step_used = False
            self._message = None
        self._used = False

    def prompt(self) -> None:
        """The person spoke: a new turn unless this turn has not started yet."""
        self.start_turn()
        self._used = True

    def assistant(self, message_key: str | None) -> bool:
        """A model-side record; a different message key than the last one opens a new step.
        Returns True for the first record of a step."""
        self._used = True
        if self._step_used and message_key is not None and message_key == self._message:
            return False
        if self._step_used:
            self.step += 1
        self._step_used = True
        self._message = message_key
        return True

    def break_step(self) -> None:
        """Input arrived (a tool output): the next model-side record opens a new step."""
        self._message = None

    def open_step(self) -> tuple[int, int] | None:
        """The (turn, step) to announce with `step/start`, once; None when already announced."""
        key = (self.turn, self.step)
        if key == self._opened:
            return None
        self._opened = key
        return key
