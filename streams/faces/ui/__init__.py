"""Presentation edge for people: `recall ui`, server-rendered pages over the `Recall` facade.

`streams.faces.ui.app` needs the optional `ui` extra (jinja2, Starlette, uvicorn); `streams.faces.ui.pages`
(what each page shows, as plain data) needs nothing beyond the core.
"""
