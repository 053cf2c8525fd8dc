"""Egress by allow-list: a run reaches the network only through squid, with its tenant's rules, audited request by
request (``rules``: what an entry means; ``squid``: the configuration and the process; ``proxy``: the run's socket,
the mapping of squid's lines back to runs, the audit and the counts)."""

from .counts import read_counts
from .proxy import SOCKET_NAME, EgressProxy, EgressRecord
from .rules import DEFAULT_PRESETS, PACKAGE_REGISTRIES, Rule, RuleError, parse_rules
from .squid import SquidError

__all__ = ["EgressProxy", "EgressRecord", "Rule", "RuleError", "SquidError", "parse_rules", "read_counts",
           "DEFAULT_PRESETS", "PACKAGE_REGISTRIES", "SOCKET_NAME"]
