"""When the network drops, wait for it instead of failing the run."""

from __future__ import annotations

import asyncio
import os
import random
import re
import time
from dataclasses import dataclass
from typing import Callable, Literal
from urllib.parse import urlparse

# Fatal is tested before transient: a 401's text often says "connection" too, and
# with the order reversed the run would wait forever for a key that will never work.
# A full disk is fatal too: the session's transcript could not be written, so every resume after it fails ("No
# conversation found"), and each try is a model call paid for while nothing can be kept.
_FATAL = re.compile(
    r"\b(?:400|401|403|404)\b|invalid api key|authentication|unauthorized|permission denied|invalid_request|"
    r"credit balance|quota exceeded|budget|max_turns|CLINotFound|no space left on device|\bENOSPC\b|"
    r"database or disk is full",
    re.I,
)
_TRANSIENT = re.compile(
    r"ENOTFOUND|EAI_AGAIN|ECONNRESET|ECONNREFUSED|ETIMEDOUT|EPIPE|EHOSTUNREACH|ENETDOWN|socket hang up|"
    r"fetch failed|network error|connection error|connection dropped|can't reach the api server|"
    r"\b(?:429|500|502|503|504|529)\b|overloaded|rate limit|too many requests|timeout|timed out|"
    r"temporarily unavailable|service unavailable|internal server error",
    re.I,
)


ErrorKind = Literal["transient", "fatal", "unknown"]


def classify(text: str | None) -> ErrorKind:
    """"transient", "fatal" or "unknown" for an error text."""
    if not text:
        return "unknown"
    if _FATAL.search(text):
        return "fatal"
    if _TRANSIENT.search(text):
        return "transient"
    return "unknown"


def endpoint() -> tuple[str, int]:
    """The host and port to probe: the gateway in ANTHROPIC_BASE_URL when one is set."""
    url = urlparse(os.environ.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com")
    return url.hostname or "api.anthropic.com", url.port or (80 if url.scheme == "http" else 443)


async def reachable(host: str, port: int, timeout: float = 5.0) -> bool:
    """DNS + a TCP handshake only: no HTTP, no credentials, no spend. Any failure is False."""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except (OSError, asyncio.TimeoutError, UnicodeError):  # refused, unreachable, DNS, timeout, bad name
        return False
    writer.close()
    try:
        await writer.wait_closed()
    except OSError:  # the peer reset a connection we only opened to see it open
        pass
    return True


@dataclass
class Resilience:
    enabled: bool = True
    max_attempts: int = 6
    base_delay: float = 4.0
    max_delay: float = 120.0
    probe_timeout: float = 5.0
    probe_interval: float = 15.0
    max_offline_wait: float = 3600.0
    retry_unknown: bool = True
    # No detail of the error on purpose: the model needs "you were cut off, go on", not "ENOTFOUND".
    resume_prompt: str = "上一轮在中途被打断,没有跑完。检查一下工作台里已经落盘的东西,从中断处接着做,不要重头来过。"

    def delay_for(self, attempt: int) -> float:
        """Exponential backoff from base_delay, capped, with ±25% jitter."""
        return min(self.base_delay * 2.0 ** max(0, attempt - 1), self.max_delay) * (0.75 + random.random() * 0.5)

    def should_retry(self, kind: ErrorKind | str) -> bool:
        return kind == "transient" or (kind == "unknown" and self.retry_unknown)

    async def wait_online(self, notify: Callable[[str], None] | None = None) -> bool:
        """Block until the endpoint answers; False once max_offline_wait has passed.

        `notify` hears once when the endpoint is first found unreachable and once on recovery.
        """
        host, port = endpoint()
        deadline = time.monotonic() + self.max_offline_wait
        told = False
        while True:
            if await reachable(host, port, self.probe_timeout):
                if told and notify:
                    notify(f"{host}:{port} 已恢复")
                return True
            if not told and notify:
                notify(f"{host}:{port} 不可达,等待网络恢复")
            told = True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(self.probe_interval)
