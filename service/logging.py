"""structlog for the service: JSON lines when the output is not a terminal, key=value when it is.

Everything goes through one pipeline — the service's own loggers, flower's, uvicorn's and
Litestar's stdlib records — so an operator's log shipper sees one format. Credentials never
reach a log: the service logs names and paths, never the values of an env file.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Literal, TextIO

import structlog

__all__ = ["configure_logging", "get_logger"]

Format = Literal["json", "console", "auto"]


def _renderer(fmt: Format, stream: TextIO) -> Any:
    if fmt == "auto":
        fmt = "console" if getattr(stream, "isatty", lambda: False)() else "json"
    if fmt == "console":
        return structlog.processors.KeyValueRenderer(key_order=["timestamp", "level", "event"], drop_missing=True)
    return structlog.processors.JSONRenderer(ensure_ascii=False)


def configure_logging(fmt: Format = "auto", *, level: str = "INFO", stream: TextIO | None = None) -> None:
    """Configure structlog and the stdlib root logger to render through the same processors."""
    stream = stream or sys.stderr
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer = _renderer(fmt, stream)
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.format_exc_info, renderer],
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "_flower_service", False):
            root.removeHandler(old)
    handler._flower_service = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        lg = logging.getLogger(name)
        lg.handlers.clear()
        lg.propagate = True
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)


def get_logger(name: str = "flower.service") -> Any:
    return structlog.get_logger(name)
