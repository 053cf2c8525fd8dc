"""For operators: health, Prometheus metrics, and the security headers every response carries (the API's own
documentation is ``docs.py``).

``/metrics`` tells tenants' names, runs and spend only to the operator's scraper: a scrape with
``Authorization: Bearer <scrape token>`` (the contents of the config's ``metrics_token_file``) gets the per-tenant
series; a scrape without one gets the same metrics summed over tenants; a wrong token is a 401.
"""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, get
from litestar.datastructures import MutableScopeHeaders
from litestar.openapi.datastructures import ResponseSpec
from litestar.types import Message, Scope

from ..metrics import CONTENT_TYPE
from .deps import ConfigDep, GateDep, HealthDep, MetricsDep, ScrapeDep
from .errors import example_error
from .examples import HEALTHY, METRICS, REFUSING, ok
from .schemas import ErrorOut, HealthOut

__all__ = ["healthz", "metrics", "security_headers", "PAGE_POLICY", "DOCS_POLICY"]

# The web page loads only its own files and talks only to its own origin; nothing may frame it (clickjacking).
PAGE_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
               "object-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
# The docs page (/schema, service/api/docs.py) is the page's policy but for Swagger UI's icons, which its
# stylesheet carries as data: URLs.
DOCS_POLICY = PAGE_POLICY.replace("img-src 'self'", "img-src 'self' data:")
_NOT_THE_TOKEN = ("this is not the service's scrape token: scrape with `Authorization: Bearer <the token in "
                  "metrics_token_file>`, or with none for the metrics summed over tenants")
_ALWAYS = {"X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}


async def security_headers(message: Message, scope: Scope) -> None:
    """On every response (the page, its assets, the API, errors): no framing, no sniffing, no referrer, and the
    page's Content-Security-Policy (a hook on the app's ``send``, so a 404 from the router gets them too)."""
    if message["type"] != "http.response.start":
        return
    headers = MutableScopeHeaders.from_message(message)
    for name, value in _ALWAYS.items():
        headers[name] = value
    if "content-security-policy" not in headers:
        headers["Content-Security-Policy"] = DOCS_POLICY if scope["path"].startswith("/schema") else PAGE_POLICY


@get("/healthz", tags=["ops"], operation_id="get_health", summary="Is the service taking runs (503 when not)",
     responses={**ok(200, HEALTHY, "taking runs (`degraded` with `reasons` still answers 200)"),
                **ok(503, REFUSING, "the scheduler is not running, or the guard canary failed")})
async def healthz(health: HealthDep, gate: GateDep, config: ConfigDep) -> Response[HealthOut]:
    """For probes, without a token. A full disk or an engine away is `degraded` (200: restarting would not
    help); a failed guard canary or a stopped scheduler is a 503."""
    ok = health.scheduling
    reasons = health.reasons()  # degraded still answers 200: a full disk is no reason to restart
    out = HealthOut(status=("degraded" if reasons else "ok") if ok else "scheduler stopped", backend=config.backend,
                    reasons=reasons or None, guards=gate.held)
    if gate.refused:
        ok, out.status, out.reason = False, "refusing runs", gate.refused
    return Response(out, status_code=200 if ok else 503)


@get("/metrics", tags=["ops"], media_type=CONTENT_TYPE, operation_id="get_metrics",
     summary="Prometheus metrics (text exposition format)",
     responses={**ok(200, METRICS, "the text exposition format (summed over tenants without the scrape token)",
                     media_type=CONTENT_TYPE),
                401: ResponseSpec(data_container=ErrorOut, generate_examples=False,
                                  description="a bearer token that is not the service's scrape token",
                                  examples=[example_error(401, _NOT_THE_TOKEN)])})
async def metrics(request: Request[Any, Any, Any], metrics: MetricsDep, health: HealthDep, gate: GateDep,
                  scrape: ScrapeDep) -> Response[bytes]:
    """Runs, queue wait, durations, failures by reason, guard denials, model tokens and cost per tenant, and
    the disk, backend and canary gauges; helm/files/ holds a Grafana dashboard and alert rules over them. Per
    tenant only with `Authorization: Bearer <scrape token>`; without it, summed over tenants (no tenant's name)."""
    per_tenant = scrape.per_tenant(request.headers.get("authorization", ""))
    gauges = health.prometheus().encode()  # disk and backend gauges (service/control/health.py)
    refusing = ("# HELP flower_refusing_runs 1 while the guard canary refuses runs for this CLI (GET /healthz says "
                f"why).\n# TYPE flower_refusing_runs gauge\nflower_refusing_runs {int(bool(gate.refused))}\n")
    return Response(metrics.render(per_tenant=per_tenant) + gauges + refusing.encode(), media_type=CONTENT_TYPE)
