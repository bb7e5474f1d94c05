"""Faces: the CLI, the MCP server and the web pages, each reaching the system through the facade."""
