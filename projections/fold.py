"""Stage 1 of the flow: `fold_surface`, the one surface state machine (PROTOCOL §2), batch and incremental.

The state is paged so that a changelog-backed table can write only what an event changed: an
append touches the meta record and the tail page, never the whole surface. Pages store nodes
delta-encoded; a tool/result node carries a digest of its data with the result content blanked,
which is all the fold needs to check a later rewrite ("may change only content").
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from projections.codec import dumps, dumps_sorted, loads
from projections.errors import FoldError
from projections.events import MAX_SAFE_INTEGER, SURFACE_TYPES, as_wire

if TYPE_CHECKING:
    from projections.eventmodels import Event

#: Nodes per page. Small enough that rewriting the tail page per append stays cheap and flat.
PAGE_SIZE = 32
STATE_VERSION = 1


# Node, SurfaceState and Step are immutable NamedTuples rather than frozen dataclasses: the fold
# builds them for every event, and a frozen dataclass's __init__ costs about twice `plan` itself.
class Node(NamedTuple):
    """One surface entry: the event's seq, and for tool/result the blanked-data digest."""

    seq: int
    tool_digest: str | None = None


@dataclass(frozen=True, slots=True)
class Replacement:
    """A replacement the fold recorded: `seq` replaced the surface span start..end."""

    seq: int
    start: int
    end: int
    shadowed_seqs: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "start": self.start, "end": self.end,
                "shadowedSeqs": list(self.shadowed_seqs)}

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Replacement:
        """Inverse of `to_json`; raises KeyError, TypeError or ValueError on another shape."""
        return cls(int(value["seq"]), int(value["start"]), int(value["end"]),
                   tuple(int(s) for s in value["shadowedSeqs"]))


class SurfaceState(NamedTuple):
    """The fold's accumulator: next expected seq, replace generation, and the paged surface."""

    next_seq: int = 0
    generation: int = 0
    pages: tuple[tuple[Node, ...], ...] = ()

    @property
    def nodes(self) -> list[int]:
        return [n.seq for page in self.pages for n in page]

    @property
    def node_count(self) -> int:
        return sum(len(p) for p in self.pages)


#: `tuple.__new__(Cls, fields)` builds a NamedTuple without the Python frame of its generated
#: `__new__` (half the cost); `plan` makes two or three per event.
_new = tuple.__new__


class Step(NamedTuple):
    """The outcome of one transition: the new state, what the event did, which pages changed."""

    state: SurfaceState
    eligible: bool
    replacement: Replacement | None
    dirty_pages: tuple[int, ...]
    page_count_before: int


@dataclass(frozen=True, slots=True)
class SurfaceFold:
    """`fold_surface` output (PROTOCOL §2): surface `nodes` in model order and `replacements` in log order."""

    nodes: list[int]
    replacements: list[Replacement] = field(default_factory=list)
    state: SurfaceState = field(default_factory=SurfaceState)


def _is_safe_nonneg_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_SAFE_INTEGER


def _validate_surface_op(kind: str, seq: int, op: Any) -> tuple[int, int] | None:
    """Return None for 'append', (start, end) for a replace; raise on anything else."""
    if op is None:
        raise FoldError(f"session event {kind} at seq {seq} requires a surfaceOp marker", seq=seq)
    if op == "append":
        return None
    if (isinstance(op, dict) and set(op) == {"op", "start", "end"} and op["op"] == "replace"
            and _is_safe_nonneg_int(op["start"]) and _is_safe_nonneg_int(op["end"])):
        return int(op["start"]), int(op["end"])
    raise FoldError(f"session event {kind} at seq {seq} has an invalid surfaceOp "
                    "(expected 'append' or {op:'replace', start, end})", seq=seq)


def _validate_provenance(kind: str, seq: int, cited: Any) -> tuple[int, ...] | None:
    if cited is None:
        return None
    if not isinstance(cited, list):
        raise FoldError(f"session event {kind} at seq {seq} sourceEventSeqs must be an array",
                        seq=seq)
    if not cited and kind != "assistant/message":
        raise FoldError(f"session event {kind} at seq {seq} sourceEventSeqs must not be empty",
                        seq=seq)
    seen: set[int] = set()
    for item in cited:
        if not _is_safe_nonneg_int(item):
            raise FoldError(f"session event {kind} at seq {seq} sourceEventSeqs must hold "
                            "non-negative safe integers", seq=seq)
        if item in seen:
            raise FoldError(f"session event {kind} at seq {seq} sourceEventSeqs has duplicate "
                            f"seq {item}", seq=seq)
        if item >= seq:
            raise FoldError(f"session event {kind} at seq {seq} sourceEventSeqs cites seq {item}, "
                            "which is not earlier than the event", seq=seq)
        seen.add(item)
    return tuple(cited)


def blank_tool_result(data: Any) -> Any:
    """The tool/result data with `message.content[0]`'s content removed (PROTOCOL §2 rewrite rule)."""
    if not isinstance(data, dict):
        return data
    message = data.get("message")
    if not isinstance(message, dict):
        return data
    content = message.get("content")
    if not isinstance(content, list) or not content:
        return data
    first = content[0]
    blanked_first: Any = ({k: v for k, v in first.items() if k not in ("content", "text")}
                          if isinstance(first, dict) else None)
    return {**data, "message": {**message, "content": [blanked_first, *content[1:]]}}


def tool_digest(data: Any) -> str:
    """A stable digest of blanked tool/result data; equal digests mean deep-equal JSON."""
    canonical = dumps_sorted(blank_tool_result(data))
    return base64.b64encode(hashlib.blake2b(canonical, digest_size=16).digest()).decode("ascii")


def _flat_positions(pages: Sequence[Sequence[Node]]) -> tuple[list[Node], list[int]]:
    flat: list[Node] = []
    page_of: list[int] = []
    for p, page in enumerate(pages):
        flat.extend(page)
        page_of.extend([p] * len(page))
    return flat, page_of


def plan(state: SurfaceState, event: Event | Mapping[str, Any]) -> Step:
    """Validate `event` against `state` and return the next state; raises FoldError, mutates nothing."""
    wire = event if type(event) is dict else as_wire(event)
    kind = wire.get("type")
    seq = wire.get("seq")
    # the plain-int test first: the helper's isinstance checks cost more than the comparison
    if seq != state.next_seq or (type(seq) is not int and not _is_safe_nonneg_int(seq)) \
            or not 0 <= seq <= MAX_SAFE_INTEGER:
        raise FoldError(f"session event seq {seq} is not contiguous; expected {state.next_seq}",
                        seq=seq if isinstance(seq, int) else None, index=state.next_seq)
    assert isinstance(seq, int)
    op = wire.get("surfaceOp")
    cited_raw = wire.get("sourceEventSeqs")
    if kind not in SURFACE_TYPES:
        if op is not None:
            raise FoldError(f"session event {kind} at seq {seq} is not surface-eligible and "
                            "cannot carry surfaceOp", seq=seq)
        if cited_raw is not None:
            raise FoldError(f"session event {kind} at seq {seq} is not surface-eligible and "
                            "cannot carry sourceEventSeqs", seq=seq)
        return _new(Step, (_new(SurfaceState, (seq + 1, state.generation, state.pages)), False,
                           None, (), len(state.pages)))
    assert isinstance(kind, str)
    span = None if op == "append" else _validate_surface_op(kind, seq, op)
    cited = None if cited_raw is None else _validate_provenance(kind, seq, cited_raw)
    data = wire.get("data")
    node = _new(Node, (seq, tool_digest(data) if kind == "tool/result" else None))
    pages = state.pages
    if span is None:
        if pages and len(pages[-1]) < PAGE_SIZE:
            last = len(pages) - 1
            new_pages = (*pages[:-1], (*pages[-1], node))
        else:
            last = len(pages)
            new_pages = (*pages, (node,))
        return _new(Step, (_new(SurfaceState, (seq + 1, state.generation, new_pages)), True, None,
                           (last,), len(pages)))
    start, end = span
    flat, page_of = _flat_positions(pages)
    index = {n.seq: i for i, n in enumerate(flat)}
    if start not in index:
        raise FoldError(f"session event {kind} at seq {seq}: replace start seq {start} not found "
                        "in surface", seq=seq)
    if end not in index:
        raise FoldError(f"session event {kind} at seq {seq}: replace end seq {end} not found "
                        "in surface", seq=seq)
    start_idx, end_idx = index[start], index[end]
    if start_idx > end_idx:
        raise FoldError(f"session event {kind} at seq {seq}: start seq {start} (index {start_idx}) "
                        f"is after end seq {end} (index {end_idx})", seq=seq)
    shadowed = tuple(n.seq for n in flat[start_idx:end_idx + 1])
    missing = [s for s in shadowed if cited is None or s not in cited]
    if missing:
        raise FoldError(f"session event {kind} at seq {seq}: sourceEventSeqs is missing shadowed "
                        f"seqs {missing}", seq=seq)
    if kind == "tool/result":
        if len(shadowed) != 1 or flat[start_idx].tool_digest is None:
            raise FoldError(f"session event tool/result at seq {seq} may replace exactly one "
                            "tool/result", seq=seq)
        if flat[start_idx].tool_digest != node.tool_digest:
            raise FoldError(f"session event tool/result at seq {seq} may change only content of "
                            f"the result it replaces (seq {start})", seq=seq)
    pa, pb = page_of[start_idx], page_of[end_idx]
    offset_a = start_idx - sum(len(p) for p in pages[:pa])
    offset_b = end_idx - sum(len(p) for p in pages[:pb])
    merged = (*pages[pa][:offset_a], node, *pages[pb][offset_b + 1:])
    chunks = [merged[i:i + PAGE_SIZE] for i in range(0, len(merged), PAGE_SIZE)]
    new_pages = (*pages[:pa], *chunks, *pages[pb + 1:])
    if pa == pb and len(chunks) == 1:
        dirty: tuple[int, ...] = (pa,)
    else:
        dirty = tuple(range(pa, len(new_pages)))
    replacement = Replacement(seq, start, end, shadowed)
    return Step(SurfaceState(seq + 1, state.generation + 1, new_pages), True, replacement, dirty,
                len(pages))


def apply(state: SurfaceState | None, event: Event | Mapping[str, Any]) -> SurfaceState:
    """The incremental form: fold one event into `state` (None = empty log)."""
    return plan(state or SurfaceState(), event).state


def fold_surface(events: Iterable[Event | Mapping[str, Any]], *,
                 base_seq: int = 0) -> SurfaceFold:
    """Fold a whole log (or a contiguous window starting at `base_seq`); raises FoldError."""
    state = SurfaceState(next_seq=base_seq)
    replacements: list[Replacement] = []
    for event in events:
        step = plan(state, event)
        state = step.state
        if step.replacement is not None:
            replacements.append(step.replacement)
    return SurfaceFold(state.nodes, replacements, state)


# --- serialization of the state, for a changelog-backed table (one meta record + one per page) ---

def encode_meta(state: SurfaceState) -> bytes:
    return dumps({"v": STATE_VERSION, "n": state.next_seq, "g": state.generation,
                  "p": len(state.pages)})


def encode_page(page: Sequence[Node]) -> bytes:
    out: list[Any] = []
    prev = 0
    for n in page:
        delta = n.seq - prev
        prev = n.seq
        out.append(delta if n.tool_digest is None else [delta, n.tool_digest])
    return dumps(out)


def decode_page(raw: bytes) -> tuple[Node, ...]:
    nodes: list[Node] = []
    prev = 0
    for item in loads(raw):
        if isinstance(item, list):
            prev += int(item[0])
            nodes.append(Node(prev, str(item[1])))
        else:
            prev += int(item)
            nodes.append(Node(prev))
    return tuple(nodes)


def encode_state(state: SurfaceState) -> dict[str, bytes]:
    """The whole state as table records: key "m" for the meta, "p<i>" for page i."""
    records = {"m": encode_meta(state)}
    for i, page in enumerate(state.pages):
        records[f"p{i}"] = encode_page(page)
    return records


def encode_step(step: Step) -> dict[str, bytes | None]:
    """Only the records one transition changed (None = delete a page that no longer exists)."""
    records: dict[str, bytes | None] = {"m": encode_meta(step.state)}
    for i in step.dirty_pages:
        records[f"p{i}"] = encode_page(step.state.pages[i])
    for i in range(len(step.state.pages), step.page_count_before):
        records[f"p{i}"] = None
    return records


def decode_state(records: Mapping[str, bytes]) -> SurfaceState:
    """Rebuild a state from its table records; raises FoldError on a foreign or partial state."""
    try:
        meta = loads(records["m"])
        if meta.get("v") != STATE_VERSION:
            raise FoldError(f"fold state version {meta.get('v')} is not {STATE_VERSION}")
        pages = tuple(decode_page(records[f"p{i}"]) for i in range(int(meta["p"])))
        return SurfaceState(int(meta["n"]), int(meta["g"]), pages)
    except (KeyError, ValueError, TypeError) as exc:
        raise FoldError(f"fold state records are incomplete or malformed: {exc}") from exc
