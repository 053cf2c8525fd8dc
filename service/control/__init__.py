"""The control plane: what decides which run runs where, and follows it to its end.

``scheduler`` (the loop) composes ``starting`` (queued runs become sandboxes), ``finishing`` (a run ends once),
``recovery`` (re-attach, take over, a down engine) — all three sharing one ``following`` — and the collaborators
they use: ``launcher``, ``warm``, ``feed``/``events``, ``harvest``, ``mailbox``, ``retention``, ``leases``,
``streams``, ``grants``, ``health``, ``backoff``; beside the loop: ``admission`` (the submit rules), ``canary`` and
its ``gate``, ``hooks``. Each is handed by ``service.wiring`` only the registry tables it uses."""
