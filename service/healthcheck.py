"""``python -m service.healthcheck``: the service image's HEALTHCHECK — GET /healthz of the service configured
here, as ``python -m service`` reads its config; exit 0 on a 200 (ok or degraded), 1 otherwise, one line said."""

from __future__ import annotations

import sys
import urllib.error
import urllib.request

from .config import ServiceConfigError, load_config

TIMEOUT_S = 4.0


def main() -> int:
    try:
        config = load_config()
    except ServiceConfigError as e:
        print(f"unhealthy: {e}")
        return 1
    if config.port == 0:
        print("unhealthy: the service listens on a port it picks (port = 0): set a port in its config to check it")
        return 1
    host = "127.0.0.1" if config.host in ("", "0.0.0.0", "::") else config.host  # listening everywhere: ask here
    url = f"http://{'[' + host + ']' if ':' in host else host}:{config.port}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as answer:  # noqa: S310 - the configured host only
            print(f"healthy: {url} answered {answer.status}")
            return 0
    except urllib.error.HTTPError as e:
        print(f"unhealthy: {url} answered {e.code}: {e.read(300).decode('utf-8', 'replace')}")
    except OSError as e:
        print(f"unhealthy: {url} did not answer ({e})")
    return 1


if __name__ == "__main__":
    sys.exit(main())
