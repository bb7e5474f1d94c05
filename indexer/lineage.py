"""Storage and read side: session lineage (PROTOCOL §3.1 traceSession), iterative in both directions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from indexer.errors import INVALID_LINEAGE, SESSION_NOT_FOUND, query_error


def _child_order(header: Mapping[str, Any]) -> tuple[int, str]:
    return (int(header.get("createdAt") or 0), str(header["id"]))


def trace_lineage(headers: Mapping[str, Mapping[str, Any]], target: str) -> dict[str, Any]:
    """Ancestors nearest first, completeness, and the descendant tree (siblings by createdAt, id)."""
    if target not in headers:
        raise query_error(SESSION_NOT_FOUND, f"session {target!r} not found")
    ancestors: list[dict[str, Any]] = []
    seen = {target}
    parent = headers[target].get("parentSession")
    result: dict[str, Any] = {"session": dict(headers[target])}
    while True:
        if parent is None:
            result["complete"] = True
            result["root"] = dict(ancestors[-1]) if ancestors else dict(headers[target])
            break
        if parent == target:
            raise query_error(INVALID_LINEAGE, f"the parent chain of {target!r} has a cycle")
        if parent not in headers or parent in seen:
            result["complete"] = False
            result["unresolvedParentId"] = parent
            break
        seen.add(parent)
        ancestors.append(dict(headers[parent]))
        parent = headers[parent].get("parentSession")
    result["ancestors"] = ancestors
    children: dict[str, list[Mapping[str, Any]]] = {}
    for header in headers.values():
        p = header.get("parentSession")
        if isinstance(p, str):
            children.setdefault(p, []).append(header)
    root_nodes: list[dict[str, Any]] = []
    # Explicit stack: lineages thousands deep must not hit the recursion limit.
    stack: list[tuple[str, list[dict[str, Any]]]] = [(target, root_nodes)]
    visited = {target}
    while stack:
        sid, into = stack.pop()
        for child in sorted(children.get(sid, []), key=_child_order):
            cid = str(child["id"])
            if cid in visited:
                continue
            visited.add(cid)
            node: dict[str, Any] = {"header": dict(child), "children": []}
            into.append(node)
            stack.append((cid, node["children"]))
    result["descendants"] = root_nodes
    return result
