"""The registry's versioned migrations (Alembic): ``env.py`` and one file per revision under ``versions/``."""
