"""HTTP routes over published segments: Druid's SQL endpoint (run, cancel) and its datasource list."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Body, Request
from fastapi.responses import JSONResponse, Response

from overlord.http.audit import author_of
from overlord.http.redact import SecretRegistry
from overlord.overlord_errors import NotFound
from overlord.query.engine import QueryLimits, SqlQuery
from overlord.query.formats import CONTENT_TYPES
from overlord.query.process import Answer, QueryProcess
from overlord.supervisor.manager import Overlord
from segment_store.timeline import datasources
from specs import load_supervisor_spec

__all__ = ["query_routes"]



def query_routes(overlord: Overlord, secrets: SecretRegistry, queries: QueryProcess) -> APIRouter:
    """``POST /druid/v2/sql`` and ``/druid/v2/datasources``.

    Queries run in ``queries``, the query engine's own process. SQL results are scrubbed of known
    secret values (a task's error in ``sys.tasks`` may quote one).
    """
    engine = overlord.engine
    limits = QueryLimits.from_settings(overlord.settings)
    router = APIRouter()

    @router.post("/druid/v2/sql", tags=["query"], summary="SQL over published segments (Druid's request shape)")
    @router.post("/druid/v2/sql/", tags=["query"], include_in_schema=False)  # pydruid's path: no redirect
    def sql(body: SqlQuery, request: Request) -> Response:
        query_id = body.query_id()
        timeout_ms = body.limits(limits).timeout_ms
        started = time.perf_counter()
        answer = timed(lambda: queries.run("sql", body.model_dump(by_alias=True), query_id, timeout_ms,
                                           author_of(request)))
        result = answer.result
        content = secrets.scrub(result) if isinstance(result, str) else json.dumps(secrets.scrub_strings(result))
        headers = {"X-Druid-SQL-Query-Id": query_id, **answered(answer, started)} | (
            {"X-Druid-SQL-Header-Included": "yes"} if body.header else {})
        return Response(content, media_type=CONTENT_TYPES[body.result_format], headers=headers)

    @router.post("/druid/v2", tags=["query"], summary="A native query (timeseries, topN, groupBy, timeBoundary, "
                                                      "dataSourceMetadata), Druid's shapes")
    @router.post("/druid/v2/", tags=["query"], include_in_schema=False)
    def native(body: Annotated[dict[str, Any], Body()], request: Request) -> Response:
        query_id = str((body.get("context") or {}).get("queryId") or uuid.uuid4().hex)
        started = time.perf_counter()
        answer = timed(lambda: queries.run("native", body, query_id, limits.timeout_ms, author_of(request)))
        return JSONResponse(answer.result, headers=answered(answer, started))

    def answered(answer: Answer, started: float) -> dict[str, str]:
        """Headers: the engine that answered (DuckDB or Spark), the query's wait for its turn and its run time."""
        ran_ms, queued_ms = (time.perf_counter() - started - answer.queued_s) * 1000, answer.queued_s * 1000
        took = {"X-Overlord-Query-Time-Ms": f"{ran_ms:.0f}", "X-Overlord-Query-Queue-Ms": f"{queued_ms:.0f}"}
        return took | ({"X-Overlord-Query-Engine": answer.engine} if answer.engine else {})

    def timed(run: Callable[[], Answer]) -> Answer:
        """Run a query, observing its duration (and its wait for a turn) and outcome in the query histograms."""
        started, outcome = time.perf_counter(), "error"
        try:
            answer = run()
            outcome = "ok"
            overlord.metrics.query_queue_seconds.observe(answer.queued_s)
            return answer
        finally:
            overlord.metrics.query_seconds.labels(outcome).observe(time.perf_counter() - started)

    @router.get("/druid/v2/datasources", tags=["query"], summary="Datasources with published segments (Druid's)")
    def list_datasources() -> Response:
        return JSONResponse(datasources(engine))

    @router.get("/druid/v2/datasources/{datasource}", tags=["query"],
                summary="A datasource's dimensions and metrics, from its (last) supervisor spec")
    def describe_datasource(datasource: str) -> Response:
        history = overlord.store.history(datasource) if datasource in datasources(engine) else []
        if not history:
            raise NotFound(f"no datasource {datasource!r} with published segments and a supervisor spec")
        schema = load_supervisor_spec(history[0].spec).spec.data_schema
        return JSONResponse({"dimensions": schema.dimensions_spec.names,
                             "metrics": [metric.name for metric in schema.metrics_spec]})

    @router.delete("/druid/v2/sql/{query_id}", tags=["query"], summary="Cancel a running query (202, or 404)")
    def cancel(query_id: str) -> Response:
        if not queries.cancel(query_id):
            raise NotFound(f"no running query with sqlQueryId {query_id!r}")
        return Response(status_code=202)

    return router
