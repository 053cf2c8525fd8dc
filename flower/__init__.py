"""flower: long-horizon coding agents on claude-agent-sdk that stay honest for hours or days."""

from .core.agent import PLUGIN_DIR, AgentSpec, CompactPolicy, HandoffPolicy, build_options, default_window
from .core.credentials import check_credentials, load_dotenv

__version__ = "0.1.0"

__all__ = [
    "AgentSpec", "build_options", "CompactPolicy", "HandoffPolicy", "default_window", "PLUGIN_DIR",
    "load_dotenv", "check_credentials", "__version__",
]
