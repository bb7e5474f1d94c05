"""Ingest edge: Codex CLI response items → native message blocks, tool results and error codes."""

from __future__ import annotations

import re
from typing import Any

from projections.codec import JSONDecodeError, dumps, loads

#: response_item types the model itself produced (they open a new step after any input).
ASSISTANT_ITEMS = frozenset({"reasoning", "function_call", "custom_tool_call", "local_shell_call",
                             "web_search_call", "image_generation_call", "tool_search_call"})
CALL_ITEMS = frozenset({"function_call", "custom_tool_call", "local_shell_call",
                        "web_search_call", "image_generation_call", "tool_search_call"})
OUTPUT_ITEMS = frozenset({"function_call_output", "custom_tool_call_output",
                          "tool_search_output"})
META_PLUGIN = "codex-meta"

_EXIT = re.compile(r"(?:Process exited with code|Exit code:?)\s*(-?\d+)")
_TAGGED = re.compile(r"^<([A-Za-z_][\w-]*)>.*</\1>\s*$", re.DOTALL)
#: Context Codex injects as user-role messages; matched on the opening tag alone, because a
#: long notification may be cut short (by a capture tool, or a truncation policy).
_CONTEXT_TAGS = ("<environment_context>", "<user_instructions>", "<subagent_notification>",
                 "<turn_aborted>", "<user_shell_command>", "<INSTRUCTIONS>")


def text_blocks(content: Any) -> list[Any]:
    """Codex content items → native blocks: input_text/output_text become text; others kept."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    blocks: list[Any] = []
    for item in content if isinstance(content, list) else []:
        if isinstance(item, dict) and item.get("type") in ("input_text", "output_text", "text"):
            blocks.append({"type": "text", "text": item.get("text", "")})
        else:
            blocks.append(item)
    return blocks


def plain_text(content: Any) -> str:
    return "\n".join(str(b.get("text", "")) for b in text_blocks(content)
                     if isinstance(b, dict) and b.get("type") == "text")


def is_injected(role: str, content: Any) -> bool:
    """Developer/system messages, AGENTS.md, and tag-wrapped context (<environment_context>,
    <subagent_notification>, <turn_aborted>, …) are the harness speaking, not the person."""
    if role != "user":
        return True
    text = plain_text(content).strip()
    return (text.startswith(("# AGENTS.md instructions", *_CONTEXT_TAGS))
            or bool(_TAGGED.match(text)))


def reasoning_blocks(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """Readable reasoning (summary parts, then content parts); encrypted-only becomes one empty
    block, so the step still shows that the model reasoned."""
    texts = [str(p.get("text", "")) for key in ("summary", "content")
             for p in (payload.get(key) or []) if isinstance(p, dict)]
    if not texts:
        return [{"type": "reasoning", "text": "", "encrypted": True}]
    return [{"type": "reasoning", "text": t} for t in texts]


def call_block(payload: dict[str, Any]) -> dict[str, Any]:
    """Any tool-calling item as a tool-call block; JSON-string arguments are decoded."""
    kind = payload.get("type")
    call_id = str(payload.get("call_id") or payload.get("id") or "")
    if kind == "function_call":
        return {"type": "tool-call", "toolCallId": call_id, "name": payload.get("name", ""),
                "arguments": decode_arguments(payload.get("arguments"))}
    if kind == "custom_tool_call":
        return {"type": "tool-call", "toolCallId": call_id, "name": payload.get("name", ""),
                "arguments": payload.get("input", "")}
    name = str(kind).removesuffix("_call")
    arguments = payload.get("action", payload.get("arguments", {}))
    return {"type": "tool-call", "toolCallId": call_id, "name": name, "arguments": arguments}


def decode_arguments(arguments: Any) -> Any:
    if not isinstance(arguments, str):
        return arguments
    try:
        return loads(arguments)
    except JSONDecodeError:
        return arguments


def output_content(output: Any) -> Any:
    """function_call_output.output: a string, content items, or {content, success}."""
    if isinstance(output, dict) and "content" in output:
        return output_content(output["content"])
    if isinstance(output, list):
        return text_blocks(output)
    if isinstance(output, str):
        return output
    return dumps(output).decode("utf-8")


def failure(output: Any) -> str | None:
    """An error code when the output says the call failed: `EXIT_<n>` for a non-zero exit,
    `TOOL_ERROR` for `success: false`; None for success."""
    if isinstance(output, dict) and output.get("success") is False:
        return "TOOL_ERROR"
    code = _exit_code(output)
    if code is not None and code != 0:
        return f"EXIT_{code}"
    return None


def _exit_code(output: Any) -> int | None:
    if isinstance(output, str):
        decoded = decode_arguments(output)
        if isinstance(decoded, dict):
            return _exit_code(decoded)
        # Only the preamble: the command's own output may print "Exit code" too.
        match = _EXIT.search(output.split("\nOutput:", 1)[0][:4096])
        return int(match.group(1)) if match else None
    if isinstance(output, dict):
        meta = output.get("metadata")
        if isinstance(meta, dict) and isinstance(meta.get("exit_code"), int):
            return int(meta["exit_code"])
        if isinstance(output.get("output"), str):
            return _exit_code(output["output"])
    return None
