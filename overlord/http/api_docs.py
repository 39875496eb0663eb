"""The API reference at ``/docs``: every route of the OpenAPI description as one HTML page.

Rendered here from ``app.openapi()`` with the console's stylesheet, so it needs nothing from
the internet (FastAPI's own pages load Swagger UI and Redoc from a CDN, so they are turned off).
The machine-readable description stays at ``/openapi.json``. Every value is HTML-escaped.
"""

from __future__ import annotations

from collections.abc import Callable
from html import escape
from typing import Any

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

__all__ = ["api_docs_routes"]

_METHODS = ("get", "post", "put", "delete", "patch")


def api_docs_routes(openapi: Callable[[], dict[str, Any]]) -> APIRouter:
    """``GET /docs``."""
    router = APIRouter()

    @router.get("/docs", tags=["service"], summary="This API's reference (HTML, offline)", response_class=HTMLResponse)
    def docs() -> HTMLResponse:
        return HTMLResponse(render(openapi()))

    return router


def render(description: dict[str, Any]) -> str:
    """The page: the routes grouped by tag, each with its summary, parameters and request body."""
    by_tag: dict[str, list[str]] = {}
    for path, operations in description.get("paths", {}).items():
        for method in _METHODS:
            if (operation := operations.get(method)) is not None:
                tag = (operation.get("tags") or ["other"])[0]
                by_tag.setdefault(tag, []).append(_operation(method, path, operation))
    sections = "".join(f'<section id="{escape(tag)}"><h2>{escape(tag)}</h2>{"".join(rows)}</section>'
                       for tag, rows in sorted(by_tag.items()))
    toc = " ".join(f'<a href="#{escape(tag)}">{escape(tag)}</a>' for tag in sorted(by_tag))
    info = description.get("info", {})
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{escape(info.get("title", "API"))} '
            f'API</title><link rel="stylesheet" href="/console/console.css"></head><body><header><h1>'
            f'{escape(info.get("title", "API"))} API {escape(str(info.get("version", "")))}</h1><nav>{toc} '
            f'<a href="/openapi.json">openapi.json</a> <a href="/">console</a></nav></header>'
            f'<p class="muted">{escape(info.get("description", ""))}</p>{sections}</body></html>')


def _operation(method: str, path: str, operation: dict[str, Any]) -> str:
    parameters = "".join(
        f'<li><code>{escape(p.get("name", ""))}</code> ({escape(p.get("in", ""))}'
        f'{", required" if p.get("required") else ""}){_type(p.get("schema", {}))}</li>'
        for p in operation.get("parameters", []))
    body = operation.get("requestBody", {}).get("content", {})
    bodies = "".join(f"<li>body: <code>{escape(kind)}</code>{_type(content.get('schema', {}))}</li>"
                     for kind, content in body.items())
    details = f"<ul>{parameters}{bodies}</ul>" if parameters or bodies else ""
    return (f'<div class="route"><h3><code>{method.upper()} {escape(path)}</code></h3>'
            f'<p>{escape(operation.get("summary", ""))}</p>{details}</div>')


def _type(schema: dict[str, Any]) -> str:
    name = schema.get("$ref", "").rsplit("/", 1)[-1] or schema.get("type", "")
    return f": {escape(str(name))}" if name else ""
