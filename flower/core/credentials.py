"""Where credentials come from, in a fixed order, since host settings are never read.

flower runs with `setting_sources=[]`, so the CLI does not see ~/.claude. The price
is that credentials must be brought in explicitly. Order (first found wins):

1. the process environment
2. the file named by $FLOWER_ENV
3. ./.env (current directory)
4. ~/.config/flower/.env
5. .env at the root of the flower code repository (beside plugin/)
6. last resort: only the credential keys below from the `env` block of
   ~/.claude/settings.json ($CLAUDE_CONFIG_DIR/settings.json when set) — where to
   find the token and endpoint, nothing that changes how the agent behaves.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from dotenv import dotenv_values

from .errors import CredentialsError

CODE_ROOT = Path(__file__).resolve().parents[2]  # agent.PLUGIN_DIR's parent, without importing the SDK

# The nine keys borrowed from settings.json: the token (three ways of giving it), the
# endpoint and headers a proxy needs, and the model names a proxy's token is bound to.
SETTINGS_KEYS = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_CUSTOM_HEADERS",
    "ANTHROPIC_MODEL",
    "ANTHROPIC_DEFAULT_OPUS_MODEL",
    "ANTHROPIC_DEFAULT_SONNET_MODEL",
    "ANTHROPIC_DEFAULT_HAIKU_MODEL",
)
# Every variable that decides which credentials, endpoint or config a run ends up with.
LOOKUP_VARS = (*SETTINGS_KEYS, "FLOWER_ENV", "CLAUDE_CONFIG_DIR")
# Any one of these means the CLI can authenticate.
TOKEN_KEYS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN",
              "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX")


def user_env_file(home: Path | None = None) -> Path:
    """~/.config/flower/.env: where `flower setup` writes and the lookup reads, for this user."""
    return (home or Path.home()) / ".config" / "flower" / ".env"


def _places(cwd: Path | None, home: Path | None, code_root: Path | None) -> list[tuple[str, Path | None]]:
    home = home or Path.home()
    env_file = os.environ.get("FLOWER_ENV")
    config = Path(os.environ["CLAUDE_CONFIG_DIR"]) if os.environ.get("CLAUDE_CONFIG_DIR") else home / ".claude"
    return [
        ("$FLOWER_ENV", Path(env_file).expanduser() if env_file else None),
        ("./.env", (cwd or Path.cwd()) / ".env"),
        ("~/.config/flower/.env", user_env_file(home)),
        ("repo .env", (code_root or CODE_ROOT) / ".env"),
        ("settings.json env", config / "settings.json"),
    ]


def _settings_env(path: Path) -> dict[str, str]:
    try:
        env = json.loads(path.read_text(encoding="utf-8")).get("env") or {}
    except (OSError, ValueError, AttributeError):
        return {}
    return {k: str(v) for k, v in env.items() if k in SETTINGS_KEYS and v not in (None, "")}


def load_dotenv(*, cwd: Path | None = None, home: Path | None = None, code_root: Path | None = None) -> dict[str, str]:
    """Fill the process env from the places above; returns {key: where it came from}.

    Nothing already set is overridden, so the process env always wins and earlier
    places win over later ones.
    """
    taken: dict[str, str] = {}
    for label, path in _places(cwd, home, code_root):
        if path is None or not path.is_file():
            continue
        # No ${VAR} expansion: a secret that happens to contain "${" must arrive unchanged.
        values = _settings_env(path) if label == "settings.json env" else dotenv_values(path, interpolate=False)
        for key, value in values.items():
            if value is not None and value != "" and not os.environ.get(key):
                os.environ[key] = value
                taken[key] = f"{label} ({path})"
    return taken


def check_credentials(*, cwd: Path | None = None, home: Path | None = None, code_root: Path | None = None) -> str:
    """Return the credential key in use, or raise CredentialsError (a RuntimeError) naming every place looked."""
    for key in TOKEN_KEYS:
        if os.environ.get(key):
            return key
    looked = ["the process environment"] + [
        f"{label} ({path})" if path else f"{label} (not set)" for label, path in _places(cwd, home, code_root)
    ]
    raise CredentialsError(
        "No Anthropic credentials found: set ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN / CLAUDE_CODE_OAUTH_TOKEN) "
        "in one of: " + "; ".join(looked),
        looked=looked,
    )
