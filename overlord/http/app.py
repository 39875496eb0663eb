"""The overlord's HTTP app: routers, error handling and the OpenAPI description.

Routes live by concern: :mod:`overlord.http.supervisors` and :mod:`overlord.http.tasks`
(Druid's calls under ``/druid/indexer/v1``), :mod:`overlord.http.query_routes` (SQL and
compaction), :mod:`overlord.http.service` (``/metrics``, ``/health``, ``/status``), :mod:`overlord.http.console_routes`
(the console at ``/``). Every answer leaves through :class:`overlord.http.replies.Replies`.
Before any route, ASGI middlewares, outermost first: request metrics
(:mod:`overlord.http.request_metrics`), the ``Host`` allow-list
(:mod:`overlord.http.same_origin`), :mod:`overlord.http.auth` (credentials and roles), no changes
from other sites' pages (:mod:`overlord.http.same_origin`), :mod:`overlord.http.body_limit` (the
request body cap), :mod:`overlord.http.json_bodies` (bodies declared JSON, nesting bounded) and
:mod:`overlord.http.standby` (a standby redirects leader-only calls to the leader) and
:mod:`overlord.http.audit` (every change recorded: who, what, when, from where).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import unquote

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from overlord.coordinator.duties import Coordinator
from overlord.http.api_docs import api_docs_routes
from overlord.http.audit import AuditLog, audit_routes
from overlord.http.auth import Authenticator, AuthMiddleware
from overlord.http.body_limit import BodySizeLimit
from overlord.http.console_routes import console_routes
from overlord.http.coordinator import coordinator_routes
from overlord.http.json_bodies import JsonBodies
from overlord.http.query_routes import query_routes
from overlord.http.redact import SecretLogFilter, SecretRegistry
from overlord.http.replies import ApiError, Replies
from overlord.http.request_metrics import RequestMetrics
from overlord.http.same_origin import HostAllowList, SameOriginWrites, Site
from overlord.http.service import service_routes
from overlord.http.standby import StandbyRedirect
from overlord.http.supervisors import supervisor_routes
from overlord.http.tasks import task_routes
from overlord.metrics import SegmentCacheCollector, package_version
from overlord.overlord_errors import NotFound, NotLeader
from overlord.query.process import QueryProcess
from overlord.query.query_errors import QueryError
from overlord.supervisor.manager import Overlord
from specs import SpecError, SupervisorSpec
from specs.loader import loc_path

__all__ = ["create_app"]

logger = logging.getLogger(__name__)


def _validation_path(loc: Sequence[int | str]) -> str:
    parts = list(loc[1:]) if loc and loc[0] in ("body", "query", "path", "header") else list(loc)
    if loc and loc[0] == "body" and parts and isinstance(parts[-1], int) and len(parts) == 1:
        parts = []  # json_invalid: loc is ("body", character position)
    return loc_path(parts) or "$"


def _spec_openapi() -> dict[str, Any]:
    """OpenAPI component schemas of the supervisor spec (the body of ``POST /supervisor``)."""
    schema = SupervisorSpec.model_json_schema(by_alias=True, ref_template="#/components/schemas/{model}")
    defs = schema.pop("$defs", {})
    return {**defs, "SupervisorSpec": schema}


def create_app(overlord: Overlord, secrets: SecretRegistry | None = None, *, authenticator: Authenticator | None,
               coordinator: Coordinator | None = None) -> FastAPI:
    """The ASGI app over ``overlord`` (already started). ``secrets`` is shared with the log filter.

    ``coordinator`` answers the coordinator calls: the one whose duties run, or by default one that
    only answers them (the duties' schedule is then off).

    ``authenticator`` None runs the API open to anyone who can reach it (the dev stack and tests).
    ``app.state.queries`` is the query engine's process (:mod:`overlord.query.process`), starting
    in the background (at the first query unless ``OVERLORD_QUERY_ENGINE_EAGER``); whoever serves the app stops it.
    """
    secrets = secrets or SecretRegistry()
    overlord.runner.logs.addFilter(SecretLogFilter(secrets))  # task logs are served: scrubbed like the log
    secrets.learn(sup.spec.to_druid_json() for sup in list(overlord.supervisors.values()))
    app = FastAPI(title="overlord", version=package_version(), docs_url=None, redoc_url=None,  # CDN pages: see api_docs
                  description="Druid-compatible supervisor and task API of the Kafka-to-segment indexing service.")

    out = Replies(overlord, secrets)
    coordinator = coordinator or Coordinator(overlord)
    error_reply = out.error

    # --- errors ----------------------------------------------------------------------------

    @app.exception_handler(SpecError)
    async def _spec_error(_request: Request, exc: SpecError) -> Response:
        detail = "; ".join(f"{p}: {m}" if p else m for p, m in exc.errors)
        return error_reply(400, f"invalid supervisor spec: {detail}", exc.errors)

    @app.exception_handler(RequestValidationError)
    async def _invalid_request(_request: Request, exc: RequestValidationError) -> Response:
        errors = [(_validation_path(e.get("loc", ())), str(e.get("msg", "invalid"))) for e in exc.errors()]
        return error_reply(400, "invalid request: " + "; ".join(f"{p}: {m}" for p, m in errors), errors)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, exc: StarletteHTTPException) -> Response:
        return error_reply(exc.status_code, str(exc.detail))  # no such route, method not allowed

    @app.exception_handler(NotFound)
    async def _not_found(_request: Request, exc: NotFound) -> Response:
        return error_reply(404, str(exc))

    @app.exception_handler(NotLeader)
    async def _not_leader(_request: Request, exc: NotLeader) -> Response:
        return error_reply(503, str(exc))

    @app.exception_handler(QueryError)
    async def _bad_query(_request: Request, exc: QueryError) -> Response:
        retry = {"Retry-After": str(exc.retry_after)} if exc.retry_after is not None else None
        return JSONResponse(exc.to_druid(), status_code=exc.status, headers=retry)

    @app.exception_handler(ApiError)
    async def _refused(_request: Request, exc: ApiError) -> Response:
        return error_reply(exc.status, exc.message, exc.errors)

    @app.middleware("http")
    async def _unexpected(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        if "\x00" in request.url.path or "\x00" in unquote(request.url.query):
            return error_reply(400, "NUL characters are not allowed in the URL")  # PostgreSQL text cannot hold them
        try:
            return await call_next(request)
        except Exception:
            logger.exception("%s %s failed", request.method, request.url.path)
            return error_reply(500, "internal error; the overlord's log has the traceback")

    queries = app.state.queries = QueryProcess(
        overlord.settings, lambda reason: overlord.metrics.query_engine_restarts.labels(reason).inc())
    overlord.metrics.registry.register(SegmentCacheCollector(queries.segment_cache_stats))
    if overlord.settings.query_engine_eager:
        queries.start()  # its own Spark application, starting now so that it is ready for the first query

    base_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = base_openapi()
            schema.setdefault("components", {}).setdefault("schemas", {}).update(_spec_openapi())
        return app.openapi_schema or {}

    app.openapi = openapi  # type: ignore[method-assign]
    for router in (supervisor_routes(out), task_routes(out), service_routes(out, queries),
                   console_routes(out, queries, coordinator), coordinator_routes(out, coordinator), audit_routes(out),
                   query_routes(overlord, out.secrets, queries), api_docs_routes(app.openapi)):
        app.include_router(router)
    site = Site.of(overlord.settings.public_urls or ())  # innermost first: a request meets them bottom to top
    app.add_middleware(AuditLog, store=overlord.store)  # changes the leader made, by whom
    app.add_middleware(StandbyRedirect, overlord=overlord)  # after credentials: a leader's URL is not for anyone
    app.add_middleware(JsonBodies)
    app.add_middleware(BodySizeLimit, max_bytes=overlord.settings.http_max_body_bytes)
    app.add_middleware(SameOriginWrites, site=site)
    if authenticator is not None:
        app.add_middleware(AuthMiddleware, authenticator=authenticator)  # before any body is read
    app.add_middleware(HostAllowList, site=site)  # no work for another site's name
    app.add_middleware(RequestMetrics, metrics=overlord.metrics)  # outermost: every request counted
    return app
