"""The data plane: the model gateway — the only way a run reaches the model, and the reason the tenant's key never
enters it.

Each run gets a token of its own (in its env file) and, on the Docker and local backends, a unix socket of its own
in a service-owned folder mounted read-only into the sandbox (the runner bridges it to a loopback port,
``sandbox.bridge``); on Kubernetes the runs reach a TCP port. The gateway swaps in the tenant's credentials,
forwards to the tenant's upstream and streams the answer back as it comes, reading it on the way: usage and cost
per run, the tool calls the model asks for, the guard denials and spills the CLI sends back — the audit a run
cannot suppress or forge. What reaches the provider is allowed by name, never merely not denied; money is counted
from the upstream's side, and a call is let through only when the most it can cost fits in the run's budgets beside
what the calls in flight hold.

Its layers, each touching only what is named (imports go down the list, never up):

- ``server``     connections and framing: the listeners, their bounds, h11, a request's head and body. Asks
                 ``admission`` before reading a body; hands what passes to ``forward``.
- ``admission``  the policy: a pure decision from a request's decoded facts (its grant, path, sizes, what it would
                 fetch or run, the meter's answer) — no socket, no I/O, no clock.
- ``forward``    the upstream (``upstream``: its own HTTP/1.1 client) and the answer's way back, read by ``wire``
                 (usage, cost, tool calls, the most a request can cost); the meter (``grant.Meter``) is called here.
- ``grant``, ``streaks``, ``wire``  what the layers share: a live run's grant, the log's streaks, the wire's
                 parsing — no sockets.
- ``budgets``    the money a call may hold: the spend table's holds against the run's and its tenant's day's caps
                 (the registry's ``spend`` table only — it cannot end a run).
- ``metering``   the one seam for where the gateway lives, as the control plane sees it (``Metering``): in this
                 process, or in a process of its own that it reaches through the registry.
- ``daemon``     ``python -m service gateway``: the gateway as a process of its own, kept in step with the registry;
                 ``keeper``: the API's side that keeps one running (``gateway_process = "beside"``).
"""

from __future__ import annotations

from .admission import BETAS, FORWARDED, MAX_BODY, MAX_IN_FLIGHT, MAX_PASSED_VALUE, MAX_RUN_BODY_BYTES, PASSED
from .forward import DRAIN_S, STALL_S
from .grant import SECRET_KEYS, SOCKET_NAME, Grant, Held, Meter, Refused, new_token, upstream_of
from .server import MAX_PEER_CONNECTIONS, MAX_RUN_CONNECTIONS, MAX_TCP_CONNECTIONS, Gateway
from .streaks import STREAK_QUIET_S

__all__ = ["Gateway", "Grant", "Meter", "Held", "Refused", "upstream_of", "new_token", "SOCKET_NAME", "SECRET_KEYS",
           "BETAS", "FORWARDED", "MAX_BODY", "MAX_IN_FLIGHT", "MAX_PASSED_VALUE", "MAX_RUN_BODY_BYTES", "PASSED",
           "DRAIN_S", "STALL_S", "MAX_PEER_CONNECTIONS", "MAX_RUN_CONNECTIONS", "MAX_TCP_CONNECTIONS",
           "STREAK_QUIET_S"]
