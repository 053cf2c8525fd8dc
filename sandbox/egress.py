"""Inside a sandbox with an allow-list: a loopback port that leads to the service's egress proxy, and the
environment that points every tool at it.

The sandbox has no network (no route, no resolver): its one way to the network is the unix socket
``gateway/egress.sock`` the service opens beside the gateway's (read-only folder), which leads to squid with the
tenant's allow-list (``service.egress``). Tools speak to a proxy by URL, so the runner bridges a loopback port to
that socket (``sandbox.bridge``, byte for byte: squid decides, resolves the names and audits) and exports the proxy
variables the common tools read (``proxy_env``). The bridge waits for a socket that is not there yet, as the
gateway's does: the service may open it a moment after the sandbox starts.

``NO_PROXY`` names only the sandbox's own loopback: there the model gateway's bridge listens, and nothing else of
the host can be reached from it (the sandbox has its own network namespace).

Reused by setup containers: ``open_egress(socket)`` opens the bridge and returns the variables to export.
"""

from __future__ import annotations

from pathlib import Path

from .bridge import Bridge, open_bridge

__all__ = ["open_egress", "proxy_env", "EGRESS_SOCKET", "EGRESS_ENV"]

EGRESS_SOCKET = "egress.sock"  # in the run's gateway/ folder (service/egress/proxy.py SOCKET_NAME)
EGRESS_ENV = "FLOWER_EGRESS"  # "proxied", set by the backend for such a run: the runner calls open_egress
_OPEN: list[Bridge] = []  # the bridges of this process: they live as long as it does


def proxy_env(url: str) -> dict[str, str]:
    """The variables that send the common tools' traffic to the proxy at ``url`` (``http://127.0.0.1:<port>``):
    curl, wget, git, pip, npm, yarn, cargo, Go, Python's and Node's HTTP clients, and the JVM's."""
    host, _, port = url.removeprefix("http://").rstrip("/").rpartition(":")
    local = "127.0.0.1,localhost,::1"
    jvm = (f"-Dhttp.proxyHost={host} -Dhttp.proxyPort={port} -Dhttps.proxyHost={host} -Dhttps.proxyPort={port} "
           "-Dhttp.nonProxyHosts=127.0.0.1|localhost")
    return {
        "HTTP_PROXY": url, "HTTPS_PROXY": url, "http_proxy": url, "https_proxy": url,
        "ALL_PROXY": url, "all_proxy": url, "NO_PROXY": local, "no_proxy": local,
        "npm_config_proxy": url, "npm_config_https_proxy": url, "npm_config_noproxy": local,
        "YARN_HTTP_PROXY": url, "YARN_HTTPS_PROXY": url,
        "PIP_PROXY": url, "CARGO_HTTP_PROXY": url, "JAVA_TOOL_OPTIONS": jvm,
    }


def open_egress(socket: Path) -> dict[str, str]:
    """Bridge a free loopback port to ``socket`` (the service's egress proxy for this run) and return the proxy
    variables to export to everything the run spawns."""
    bridge = open_bridge(socket)
    _OPEN.append(bridge)
    return proxy_env(bridge.url)
