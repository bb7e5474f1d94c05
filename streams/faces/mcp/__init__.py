"""Agent tools: the PROTOCOL §6 session tools for MCP hosts (`recall mcp`), workspace-authorized.

The tool layer (`SessionTools`) needs only a `Recall`; the MCP SDK is imported by
`streams.faces.mcp.server` alone, so the layer stays usable where the optional `mcp` extra is absent.
"""

from streams.faces.mcp.auth import Caller
from streams.faces.mcp.tools import SessionTools, ToolAnswer

__all__ = ["Caller", "SessionTools", "ToolAnswer"]
