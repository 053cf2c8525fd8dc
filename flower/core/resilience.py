"""Retry policy for failures the network or the service causes, not the agent."""

from __future__ import annotations

import asyncio
import os
import random
import re
import socket
import time
from dataclasses import dataclass
from urllib.parse import urlparse

# Errors another attempt cannot fix: bad key, no permission, a malformed request,
# a budget or turn limit the user set. Everything else that failed is worth a retry.
_FATAL = re.compile(
    r"401|403|authenticat|invalid api key|api key|permission_error|forbidden|"
    r"invalid_request|error_max_budget|max_budget|budget|error_max_turns|max turns|billing|credit balance",
    re.I,
)
_RETRYABLE = re.compile(
    r"529|overloaded|50[0234]|server_error|api_error|rate.?limit|429|timeout|timed out|ECONNRESET|ECONNREFUSED|"
    r"connection|network|socket|fetch failed|EAI_AGAIN|ENOTFOUND|empty or malformed|temporar|exit code",
    re.I,
)


@dataclass
class Resilience:
    enabled: bool = True
    max_attempts: int = 6
    base_delay: float = 2.0
    max_delay: float = 300.0
    jitter: float = 0.25
    online_timeout: float = 1800.0
    online_poll: float = 5.0
    resume_prompt: str = (
        "[恢复] 上一次运行被网络或服务错误打断了。先看清当前状态(文件、进程、工作台),"
        "从中断的地方继续;已经完成的部分不要重做。"
    )

    def classify(self, error: str | None) -> bool:
        """True when another attempt may succeed."""
        if not error:
            return False
        if _FATAL.search(error):
            return False
        return bool(_RETRYABLE.search(error))

    def delay_for(self, attempt: int) -> float:
        """Exponential backoff (attempt 1 → base) with ±jitter, capped."""
        delay = min(self.max_delay, self.base_delay * 2 ** max(0, attempt - 1))
        return max(0.0, delay * (1 + random.uniform(-self.jitter, self.jitter)))

    async def wait_online(self, url: str | None = None) -> bool:
        """Wait until the API endpoint accepts a TCP connection (or online_timeout passes)."""
        target = urlparse(url or os.environ.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com")
        host, port = target.hostname or "api.anthropic.com", target.port or (443 if target.scheme == "https" else 80)
        deadline = time.monotonic() + self.online_timeout
        while True:
            try:
                await asyncio.to_thread(socket.create_connection((host, port), timeout=5).close)
                return True
            except OSError:
                if time.monotonic() >= deadline:
                    return False
                await asyncio.sleep(self.online_poll)
