"""For operators: health, Prometheus metrics, and the API's own documentation (served from this process:
clusters are often air-gapped, so the docs page loads nothing from a CDN)."""

from __future__ import annotations

from litestar import Response, get
from litestar.datastructures import MutableScopeHeaders
from litestar.openapi import OpenAPIConfig, ResponseSpec
from litestar.openapi.plugins import SwaggerRenderPlugin
from litestar.openapi.spec import Components, SecurityScheme
from litestar.response import Redirect
from litestar.static_files import create_static_files_router
from litestar.types import ControllerRouterHandler, Message, Scope

from ..config import ServiceConfig
from ..metrics import CONTENT_TYPE, Metrics
from ..scheduler import Scheduler
from .deps import ConfigDep, MetricsDep, SchedulerDep
from .schemas import HealthOut

__all__ = ["healthz", "metrics", "docs_redirect", "openapi_config", "docs_assets", "security_headers", "PAGE_POLICY"]

ASSETS = "/schema/assets"
# The web page loads only its own files and talks only to its own origin; nothing may frame it (clickjacking).
PAGE_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
               "object-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
# The docs page Litestar renders starts Swagger UI with an inline script: it gets the rules that do not break it.
DOCS_POLICY = "object-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
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


@get("/healthz", tags=["ops"], summary="Is the service taking runs (503 when not)",
     responses={503: ResponseSpec(HealthOut, description="the scheduler is not running, or the guard canary failed",
                                  generate_examples=False)})
async def healthz(scheduler: SchedulerDep, config: ConfigDep) -> Response[HealthOut]:
    ok = scheduler.healthy
    reasons = scheduler.health.reasons()  # degraded still answers 200: a full disk is no reason to restart
    out = HealthOut(status=("degraded" if reasons else "ok") if ok else "scheduler stopped", backend=config.backend,
                    reasons=reasons or None, guards=scheduler.hold)
    if scheduler.refusal:
        ok, out.status, out.reason = False, "refusing runs", scheduler.refusal
    return Response(out, status_code=200 if ok else 503)


@get("/metrics", tags=["ops"], media_type=CONTENT_TYPE, summary="Prometheus metrics (text exposition format)")
async def metrics(metrics: MetricsDep, scheduler: SchedulerDep) -> Response[bytes]:
    health = scheduler.health.prometheus().encode()  # disk and backend gauges (service/health.py)
    return Response(metrics.render() + health, media_type=CONTENT_TYPE)


@get("/docs", include_in_schema=False)
async def docs_redirect() -> Redirect:
    return Redirect("/schema")


def openapi_config(version: str) -> OpenAPIConfig:
    swagger = SwaggerRenderPlugin(path="/swagger", js_url=f"{ASSETS}/swagger-ui-bundle.js",
                                  css_url=f"{ASSETS}/swagger-ui.css",
                                  standalone_preset_js_url=f"{ASSETS}/swagger-ui-standalone-preset.js",
                                  favicon=f"<link rel='icon' type='image/png' href='{ASSETS}/favicon-32x32.png'>")
    return OpenAPIConfig(
        title="flower service", version=version, path="/schema", render_plugins=[swagger],
        description="Runs each tenant's ask in its own sandbox. Every /v1 route needs "
                    "`Authorization: Bearer <tenant token>` and sees only the caller's runs.",
        components=Components(security_schemes={"bearer": SecurityScheme(type="http", scheme="bearer")}),
        use_handler_docstrings=True, create_examples=False)


def docs_assets() -> ControllerRouterHandler:
    """Swagger UI's files from the ``swagger-ui-bundle`` wheel."""
    from swagger_ui_bundle import swagger_ui_path

    return create_static_files_router(path=ASSETS, directories=[swagger_ui_path], include_in_schema=False)
