"""The REST API, one small module per concern: wire types (schemas), what handlers are given (deps), errors,
the runs, their mailbox, their event stream, and the operator routes (health, metrics, docs)."""
