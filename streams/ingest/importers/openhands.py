"""Ingest edge: OpenHands event trajectories (a JSON array of events, as `openhands` saves or
exports a conversation's trajectory) → native session logs.

Each event: `{id, timestamp (ISO, no zone: UTC), source: user|agent|environment, message}`;
actions carry `action` + `args` (+ `tool_call_metadata {function_name, tool_call_id,
model_response}` when the model called a tool); observations carry `observation`, `cause` (the
action's id), `content`, `extras` (exit code, diff, agent state) and `success`.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

from projections.logformat import decompress
from streams.ingest.importers.common import (
    Emitter,
    ImportedSession,
    LineMapper,
    SourceLine,
    as_dict,
    as_list,
    as_str,
    feed_each,
    iso_ms,
    load_records,
    make_header,
    with_rejections,
)
from streams.ingest.importers.registry import ImporterSpec
from streams.ingest.importers.sniffing import document_head
from streams.ingest.importers.turns import TurnClock

PREFIX = "openhands"
#: Agent states that end the agent's turn, and how (PROTOCOL turn/end reasons).
_ENDS = {"awaiting_user_input": "completed", "finished": "completed", "stopped": "aborted",
         "paused": "aborted", "rejected": "aborted", "error": "error"}


class _OpenHandsMapper(LineMapper):
    def __init__(self, created_at: int) -> None:
        self.em = Emitter()
        self.clock = TurnClock()
        self.time = created_at
        self.calls: dict[str, tuple[int, int]] = {}
        self.call_of_action: dict[Any, str] = {}
        self.model = "unknown"

    def feed(self, line: SourceLine) -> None:
        event = line.value
        self.time = iso_ms(event.get("timestamp")) or self.time
        key = f"event:{event.get('id', line.number)}"
        if "action" in event:
            self._action(line, key, event)
        elif "observation" in event:
            self._observation(line, key, event)
        else:
            self.em.emit(line, f"{PREFIX}/event", self.time, {}, key=key)

    def _action(self, line: SourceLine, key: str, event: dict[str, Any]) -> None:
        action = as_str(event.get("action"))
        args = as_dict(event.get("args"))
        meta = as_dict(event.get("tool_call_metadata"))
        source = event.get("source")
        if action == "message" and source == "user":
            self.clock.prompt()
            self.em.open_step(line, self.clock, self.time, keyed=True)
            blocks: list[Any] = [{"type": "text", "text": as_str(args.get("content"),
                                                                 as_str(event.get("message")))}]
            blocks += [{"type": "image", "url": u} for u in as_list(args.get("image_urls"))
                       if isinstance(u, str)]
            self.em.emit(line, "user/message", self.time, {
                "id": key, "role": "user", "source": {"kind": "user"}, "content": blocks},
                op="append", key=key)
        elif (action == "message" and source == "agent") or meta:
            self._model(line, key, action, args, meta, event)
        else:  # change_agent_state, system, recall, … (no model output)
            self.em.emit(line, f"{PREFIX}/action", self.time, {"action": action}, key=key)

    def _model(self, line: SourceLine, key: str, action: str, args: dict[str, Any],
               meta: dict[str, Any], event: dict[str, Any]) -> None:
        """The model's output: its text (a message's content, else the action's `thought`)
        and, for a tool action, the call; calls of one model response share its step."""
        response = as_dict(meta.get("model_response"))
        if isinstance(response.get("model"), str):
            self.model = response["model"]
        first = self.clock.assistant(as_str(response.get("id")) or key)
        self.em.open_step(line, self.clock, self.time, keyed=True)
        text = as_str(args.get("content")) if action == "message" else as_str(args.get("thought"))
        blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        call_id = as_str(meta.get("tool_call_id"))
        if meta:
            arguments = {k: v for k, v in args.items() if k != "thought"}
            blocks.append({"type": "tool-call", "toolCallId": call_id,
                           "name": as_str(meta.get("function_name"), action),
                           "arguments": arguments})
        data: dict[str, Any] = {"turn": self.clock.turn, "step": self.clock.step,
                                "message": {"id": key, "role": "assistant", "content": blocks}}
        if first and isinstance(response.get("usage"), dict):
            data["usage"] = response["usage"]
        self.em.emit(line, "assistant/message", self.time, data, op="append", key=key)
        if meta:
            self.calls[call_id] = (self.clock.turn, self.clock.step)
            self.call_of_action[event.get("id")] = call_id
            self.em.emit(line, "tool/call", self.time, {
                "turn": self.clock.turn, "step": self.clock.step, "callId": call_id,
                "name": blocks[-1]["name"], "arguments": blocks[-1]["arguments"]},
                key=f"{key}/call")

    def _observation(self, line: SourceLine, key: str, event: dict[str, Any]) -> None:
        kind = as_str(event.get("observation"))
        extras = as_dict(event.get("extras"))
        meta = as_dict(event.get("tool_call_metadata"))
        call_id = as_str(meta.get("tool_call_id")) or self.call_of_action.get(event.get("cause"))
        if kind == "agent_state_changed":
            self._state(line, key, as_str(extras.get("agent_state")), extras, event)
        elif call_id:
            self._result(line, key, call_id, kind, extras, event)
        elif kind == "error":
            self.em.emit(line, "turn/end", self.time, {
                "turn": self.clock.turn, "reason": "error",
                "error": {"message": as_str(event.get("content"), as_str(event.get("message")))}},
                key=key)
        else:  # `null` (no observation), a user message's echo, …
            self.em.emit(line, f"{PREFIX}/observation", self.time, {"observation": kind},
                         key=key)

    def _state(self, line: SourceLine, key: str, state: str, extras: dict[str, Any],
               event: dict[str, Any]) -> None:
        self.em.emit(line, f"{PREFIX}/agent_state", self.time, {"state": state}, key=key)
        reason = _ENDS.get(state)
        if reason is None:
            return
        data: dict[str, Any] = {"turn": self.clock.turn, "reason": reason}
        if reason == "error":
            data["error"] = {"message": as_str(extras.get("reason"),
                                               as_str(event.get("message"), "agent error"))}
        self.em.emit(line, "turn/end", self.time, data, key=f"{key}/end", with_raw=False)

    def _result(self, line: SourceLine, key: str, call_id: str, kind: str,
                extras: dict[str, Any], event: dict[str, Any]) -> None:
        """What the model reads back: the content, the command's suffix (a timeout notice, the
        exit code), the diff of an edit; a failed command has its exit code as error code."""
        self.clock.break_step()
        turn, step = self.calls.get(call_id, (self.clock.turn, self.clock.step))
        metadata = as_dict(extras.get("metadata"))
        parts = [as_str(event.get("content")) or as_str(event.get("message")),
                 as_str(extras.get("diff")), as_str(metadata.get("suffix")).strip()]
        text = "\n".join(p for p in parts if p)
        exit_code = metadata.get("exit_code")
        failed = event.get("success") is False or kind == "error" or (
            isinstance(exit_code, int) and not isinstance(exit_code, bool) and exit_code != 0)
        data: dict[str, Any] = {"turn": turn, "step": step, "message": {
            "id": key, "role": "tool", "content": [{"type": "tool-result", "toolCallId": call_id,
                                                    "content": text, "isError": failed}]}}
        if failed:
            code = f"EXIT_{exit_code}" if isinstance(exit_code, int) and exit_code != 0 \
                and not isinstance(exit_code, bool) else "TOOL_ERROR"
            data["error"] = {"name": "ToolError", "code": code}
        self.em.emit(line, "tool/result", self.time, data, op="append", key=key)


def _session_id(source_name: str) -> str:
    """The trajectory names no conversation id: its file name does."""
    name = PurePath(source_name).name
    return f"{PREFIX}:{name[:-len('.json')] if name.endswith('.json') else name}"


def import_openhands(data: bytes, source_name: str) -> list[ImportedSession]:
    """One trajectory (a JSON array of events) → one session."""
    found = load_records(decompress(data), PREFIX, source_name)
    if isinstance(found, ImportedSession):
        return [found]
    lines, unreadable = found
    created = next((t for ln in lines if (t := iso_ms(ln.value.get("timestamp"))) is not None), 0)
    header = make_header(_session_id(source_name), created)
    mapper = _OpenHandsMapper(created)
    feed_each(lines, mapper.feed, mapper.em, f"{PREFIX}/unmapped")
    session = ImportedSession(header, mapper.em.events, mapper.em.rejections)
    return with_rejections(PREFIX, [session], unreadable, source_name)


def sniff(path: PurePath, head: bytes) -> bool:
    squeezed = document_head(head)
    return squeezed.startswith(b'[{"id":') and b'"source":"' in squeezed \
        and (b'"observation":' in squeezed or b'"action":' in squeezed)


SPEC = ImporterSpec(name=PREFIX, load=import_openhands, sniff=sniff,
                    claims=lambda path: False, whole_document=True)
