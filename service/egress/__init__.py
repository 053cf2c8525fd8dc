"""Egress by allow-list: a run reaches the network only through squid, with its tenant's rules, audited request by
request (``rules``: what an entry means; ``squid``: the configuration and the process; ``proxy``: the run's socket led
to squid; ``ledger``: squid's lines mapped back to runs, audited and counted)."""

from .ledger import EgressRecord, read_counts
from .proxy import SOCKET_NAME, EgressProxy
from .rules import DEFAULT_PRESETS, PACKAGE_REGISTRIES, Rule, RuleError, parse_rules
from .squid import SquidError

__all__ = ["EgressProxy", "EgressRecord", "Rule", "RuleError", "SquidError", "parse_rules", "read_counts",
           "DEFAULT_PRESETS", "PACKAGE_REGISTRIES", "SOCKET_NAME"]
