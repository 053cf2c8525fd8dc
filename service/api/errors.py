"""Errors as the API says them: ``ErrorOut`` — the status again and one sentence — whatever went wrong.

A malformed body is a 400 naming the field, never a 500; an unhandled exception is a 500 whose details go
to the operator's log only. ``errors(...)`` documents the error responses of a handler in OpenAPI with
the same ``ErrorOut`` schema the handlers below really send.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

import msgspec
from litestar import Request, Response
from litestar.exceptions import ClientException, HTTPException, SerializationException, ValidationException
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import Example
from litestar.status_codes import (
    HTTP_409_CONFLICT,
    HTTP_410_GONE,
    HTTP_422_UNPROCESSABLE_ENTITY,
    HTTP_429_TOO_MANY_REQUESTS,
)

from ..fields import explain
from ..logging import get_logger
from .schemas import MAX_ASK, MAX_BODY, ErrorOut

__all__ = ["Conflict", "Gone", "Unprocessable", "TooManyRequests", "InsufficientStorage", "errors", "example_error",
           "EXCEPTION_HANDLERS"]

log = get_logger("flower.service.api")


class Conflict(ClientException):
    status_code = HTTP_409_CONFLICT


class Gone(ClientException):
    status_code = HTTP_410_GONE


class Unprocessable(ClientException):
    status_code = HTTP_422_UNPROCESSABLE_ENTITY


class TooManyRequests(ClientException):
    status_code = HTTP_429_TOO_MANY_REQUESTS


class InsufficientStorage(HTTPException):
    status_code = 507


_WHY = {400: "the request is malformed (the error names the field)", 401: "no or an unknown bearer token",
        404: "no such run for this tenant (another tenant's run is a 404 too)",
        409: "the run is not in a state that allows this", 410: "the run's files were deleted",
        413: "the request body is larger than 1 MiB", 422: "the tenant cannot run here (repository or credentials)",
        429: "the tenant is past a limit of its own: requests a second (`Retry-After` says when to send again), "
             "queued runs, or open event streams",
        503: "the service takes no runs: the guard canary failed for this CLI (the error says which guard)",
        507: "the service's disk is full or below its free-space floor: nothing was saved"}
# what each status says, for the document's examples (sentences the handlers really send)
_SAYS = {400: "invalid request: body.ask: Expected `str` of length >= 1",
         401: "this token belongs to no tenant: check it, or ask the operator for yours",
         404: "run 20250612-093015-3f9c2a7e5b1d4c6a8e0f1b2c3d4e5f60 not found",
         409: "run 20250612-093015-3f9c2a7e5b1d4c6a8e0f1b2c3d4e5f60 has already ended (succeeded)",
         410: "run 20250612-093015-3f9c2a7e5b1d4c6a8e0f1b2c3d4e5f60 was deleted, and its events with it",
         413: f"the request body is larger than the {MAX_BODY // 2**20} MiB the service reads: shorten it (an ask "
              f"is at most {MAX_ASK:,} characters; put long material in the repository and name it in the ask)",
         422: "the repository of tenant acme is not a git repository: ask the operator of this service to fix "
              "it (the service's log says what and how)",
         429: "tenant acme already has 4 event streams open (at most 4); close one first",
         503: "the Bash guard let `rm -rf /` through for this CLI: no run starts until the operator fixes it",
         507: "the service's disk is full: nothing was queued; submit again once the operator has freed space"}


def errors(*codes: int) -> dict[int, ResponseSpec]:
    """OpenAPI responses for these error statuses (400, 401 and 429 always: every /v1 route validates its input,
    needs a token and paces its tenant)."""
    return {code: ResponseSpec(data_container=ErrorOut, description=_WHY.get(code, HTTPStatus(code).phrase),
                               generate_examples=False, examples=[example_error(code)])
            for code in sorted({400, 401, 429, *codes})}


def example_error(code: int, error: str | None = None) -> Example:
    says = error or _SAYS.get(code, HTTPStatus(code).phrase)
    return Example(summary=HTTPStatus(code).phrase, value={"status_code": code, "error": says})


def _body(status: int, error: str, extra: Any = None) -> Response[ErrorOut]:
    return Response(ErrorOut(status_code=status, error=error, extra=extra), status_code=status)


def _http_error(request: Request[Any, Any, Any], exc: HTTPException) -> Response[ErrorOut]:
    error = str(exc.detail)
    extra: Any = None
    if isinstance(exc.__cause__, SerializationException):
        error = f"the request body is not valid JSON ({exc.detail}): send a JSON object"
    if exc.status_code == 413 and error == HTTPStatus(413).phrase:  # Litestar's own, at request_max_body_size
        error = _SAYS[413]
    if isinstance(exc, ValidationException) and exc.extra:
        items = exc.extra if isinstance(exc.extra, list) else [exc.extra]
        body = _body_struct(request)
        msgs = []
        for item in items:
            if isinstance(item, dict):
                where = item.get("key") or item.get("source") or ""
                where = "body" if where == "data" else where
                msg = str(item.get("message", "")).strip()
                if where == "body" and msg == "'data'":  # Litestar's KeyError: no body at all
                    msg, where = "the body is empty: send a JSON object", ""
                elif where == "body" and body is not None:  # the body's struct says what was meant instead
                    explained = explain(msg, body, noun="field")
                    msg, where = (explained, "") if explained != msg else (msg, where)
                msgs.append(f"{where}: {msg}" if where and where not in msg else msg)
        if msgs:
            error = "invalid request: " + "; ".join(m for m in msgs if m)
        extra = msgspec.to_builtins(exc.extra, str_keys=True, enc_hook=str)
        if not isinstance(extra, (list, dict)):
            extra = None
    response = _body(exc.status_code, error, extra)
    if exc.headers:
        response.headers.update(exc.headers)
    return response


def _body_struct(request: Request[Any, Any, Any]) -> type[msgspec.Struct] | None:
    """The struct the route decodes its body into (None when it takes none)."""
    try:
        field = request.route_handler.parsed_data_field
    except (AttributeError, KeyError, ValueError):
        return None
    kind = field.annotation if field is not None else None
    return kind if isinstance(kind, type) and issubclass(kind, msgspec.Struct) else None


def _too_deep(request: Request[Any, Any, Any], exc: RecursionError) -> Response[ErrorOut]:
    return _body(400, "the request body nests too deeply: send a flat JSON object")


def _crash(request: Request[Any, Any, Any], exc: Exception) -> Response[ErrorOut]:
    from ..control.health import is_disk_full

    if is_disk_full(exc):  # an answer, a message, a cancel that cannot be written: the disk, not the service
        request.app.state.service.health.disk_full_seen()
        log.warning("api.disk_full", path=request.url.path, method=request.method, error=str(exc)[:300])
        response = _body(507, "the service's disk is full, so this was not saved; try again once the operator "
                              "has freed space")
        response.headers["Retry-After"] = "60"
        return response
    log.exception("api.unhandled", path=request.url.path, method=request.method)
    return _body(500, "internal error in the service; the operator's log has details")


EXCEPTION_HANDLERS: dict[int | type[Exception], Any] = {HTTPException: _http_error, RecursionError: _too_deep,
                                                  Exception: _crash}
