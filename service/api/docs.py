"""The API's own documentation: the OpenAPI 3.1 document and a page that renders it, both from this process.

Clusters are often air-gapped, so the page loads nothing from a CDN: Swagger UI 5 (the first line that reads
OpenAPI 3.1) is vendored in ``service/docs/swagger-ui/`` (see its VENDOR.md), and the page is started by our
own ``service/docs/start.js`` instead of an inline script, so ``/schema`` keeps the web page's strict policy.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

from litestar import Request, get
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import OpenAPIRenderPlugin
from litestar.openapi.spec import Components, SecurityScheme, Tag
from litestar.response import Redirect
from litestar.static_files import create_static_files_router
from litestar.types import ControllerRouterHandler

__all__ = ["SwaggerPage", "openapi_config", "docs_assets", "docs_redirect", "ASSETS", "FILES"]

ASSETS = "/schema/assets"
FILES = Path(__file__).resolve().parents[1] / "docs"
TAGS = [Tag(name="runs", description="Submit an ask, follow the run it becomes, read what it changed."),
        Tag(name="mailbox", description="The human channel of a running run: its questions, answers, messages "
                                        "and interrupts."),
        Tag(name="results", description="What reaches the team beyond the API: the tenant's signed webhook "
                                         "deliveries, and the run's branch pushed to its git remote."),
        Tag(name="schedules", description="Asks that come by themselves: a cron in a timezone with a budget per run, "
                                           "and a trigger URL with its own token (a CI failure's log tail)."),
        Tag(name="ops", description="For operators: health for probes, metrics for Prometheus.")]


class SwaggerPage(OpenAPIRenderPlugin):
    """Swagger UI from our own files: the page has no inline script and no inline style."""

    def __init__(self, path: str = "/swagger") -> None:
        super().__init__(path=path, favicon="", style="")

    def render(self, request: Request[Any, Any, Any], openapi_schema: dict[str, Any]) -> bytes:
        ui = f"{ASSETS}/swagger-ui"
        title = escape(str(openapi_schema["info"]["title"]))
        return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
                f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{title}</title>'
                f'<link rel="icon" type="image/png" href="{ui}/favicon-32x32.png">'
                f'<link rel="stylesheet" href="{ui}/swagger-ui.css"></head><body>'
                f'<div id="docs" data-openapi="{escape(self.get_openapi_json_route(request))}"></div>'
                f'<script src="{ui}/swagger-ui-bundle.js"></script><script src="{ASSETS}/start.js"></script>'
                f"</body></html>").encode()


def openapi_config(version: str) -> OpenAPIConfig:
    return OpenAPIConfig(
        title="flower service", version=version, path="/schema", render_plugins=[SwaggerPage()], tags=TAGS,
        description="Runs each tenant's ask in its own sandbox. Every /v1 route needs "
                    "`Authorization: Bearer <tenant token>` and sees only the caller's runs.",
        components=Components(security_schemes={"bearer": SecurityScheme(type="http", scheme="bearer")}),
        use_handler_docstrings=True, create_examples=False)


def docs_assets() -> ControllerRouterHandler:
    """The page's files: start.js and the vendored Swagger UI."""
    return create_static_files_router(path=ASSETS, directories=[FILES], include_in_schema=False)


@get("/docs", include_in_schema=False)
async def docs_redirect() -> Redirect:
    return Redirect("/schema")
