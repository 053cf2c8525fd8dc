"""A tenant's ``egress`` and the service's presets, as the operator writes them: what each form means, a malformed
entry named in one sentence (and the last good tenants file kept), and the squid configuration the rules become —
checked by squid itself (``squid -k parse``)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from service.config import load_config
from service.egress.rules import PACKAGE_REGISTRIES, Rule, parse_rules
from service.egress.squid import SquidConfig, render
from service.errors import ServiceConfigError, TenantError
from service.tenants import Tenants

TENANT = '[[tenant]]\nname = "a"\ntoken = "0123456789abcdef"\nrepo = "r"\ncredentials = "c"\n'


def tenants_file(tmp_path: Path, egress: str = "") -> Path:
    path = tmp_path / "tenants.toml"
    path.write_text(TENANT + (f"egress = {egress}\n" if egress else ""))
    return path


@pytest.mark.parametrize("egress, network, allow", [
    ("", "closed", ()),
    ('"none"', "closed", ()),
    ('"closed"', "closed", ()),
    ('"open"', "open", ()),
    ('["registry.example.com"]', "proxied", (Rule("registry.example.com"),)),
    ('["*.Example.com", "git.example.com:8443"]', "proxied", (Rule("*.example.com"), Rule("git.example.com", 8443))),
    ('[{host = "api.example.com", methods = ["get", "HEAD"]}]', "proxied",
     (Rule("api.example.com", None, ("GET", "HEAD")),)),
])
def test_each_form_of_egress_means_what_the_docs_say(tmp_path: Path, egress: str, network: str,
                                                     allow: tuple[Rule, ...]) -> None:
    tenant = Tenants(tenants_file(tmp_path, egress)).get("a")
    assert tenant is not None and (tenant.egress, tenant.egress_allow) == (network, allow)


def test_a_preset_is_its_list_and_may_be_mixed_with_hosts(tmp_path: Path) -> None:
    tenant = Tenants(tenants_file(tmp_path, '["package-registries", "git.example.com"]')).get("a")
    assert tenant is not None and tenant.egress == "proxied"
    assert {r.host for r in tenant.egress_allow} == {*PACKAGE_REGISTRIES, "git.example.com"}
    mine = Tenants(tenants_file(tmp_path, '"package-registries"'), presets={"package-registries": ["npm.example"]})
    assert [r.host for r in mine.all()[0].egress_allow] == ["npm.example"], "the config's preset replaces it"


@pytest.mark.parametrize("egress, fragment", [
    ('"everything"', "egress = 'everything': write \"none\", \"open\", a preset's name (package-registries)"),
    ('["10.0.0.1"]', "egress entry '10.0.0.1' is an address"),
    ('["[::1]:80"]', "egress entry '[::1]:80' is an address"),
    ('["registry.example.com:0"]', "egress entry 'registry.example.com:0' has a port that is not a number"),
    ('["registry.example.com:http"]', "has a port that is not a number"),
    ('["*.com"]', "egress entry '*.com' is too wide"),
    ('["reg*.example.com"]', "egress entry 'reg*.example.com' is not a host name"),
    ('["bad_name.example.com"]', "'bad_name' is not a DNS label"),
    ('[{host = "a.example.com", methods = ["CONNECT"]}]', "names method 'CONNECT'"),
    ('[{host = "a.example.com", methods = []}]', "`methods` must be a non-empty list"),
    ('[{host = "a.example.com", ports = [1]}]', "(unknown key 'ports')"),
    ('[3]', "egress entry 3 must be a host name"),
    ('[]', "the egress allow-list is empty"),
])
def test_a_malformed_entry_is_named_in_one_sentence(tmp_path: Path, egress: str, fragment: str) -> None:
    with pytest.raises(TenantError) as e:
        Tenants(tenants_file(tmp_path, egress))
    assert fragment in str(e.value) and "tenant a in" in str(e.value), str(e.value)


def test_a_malformed_entry_in_an_edit_keeps_the_last_good_file(tmp_path: Path) -> None:
    path = tenants_file(tmp_path, '["registry.example.com"]')
    errors: list[str] = []
    tenants = Tenants(path, on_reload_error=errors.append)
    path.write_text(TENANT + 'egress = ["registry.example.com", "1.2.3.4"]\n')
    os.utime(path, ns=(1, 1))
    assert [r.host for r in tenants.all()[0].egress_allow] == ["registry.example.com"]
    assert errors and "'1.2.3.4' is an address" in errors[0] and "last good tenants file stays" in errors[0]


def config(tmp_path: Path, body: str) -> Path:
    (tmp_path / "tenants.toml").write_text(TENANT)
    path = tmp_path / "service.toml"
    path.write_text(f'data_dir = "data"\ntenants = "tenants.toml"\n{body}')
    return path


def test_presets_and_internal_ranges_come_from_the_config(tmp_path: Path) -> None:
    cfg = load_config(config(tmp_path, 'egress_internal = ["10.1.2.0/24"]\n[egress_presets]\n'
                                       'mirror = ["npm.corp.example", { host = "pypi.corp.example", '
                                       'methods = ["GET"] }]\n'), env={})
    assert cfg.egress_internal == ["10.1.2.0/24"]
    presets = cfg.presets()
    assert set(presets) == {"package-registries", "mirror"}
    assert parse_rules("mirror", presets) == (Rule("npm.corp.example"), Rule("pypi.corp.example", None, ("GET",)))


@pytest.mark.parametrize("body, fragment", [
    ('[egress_presets]\nmirror = ["1.2.3.4"]\n', "egress preset 'mirror' in"),
    ('[egress_presets]\nopen = ["a.example.com"]\n', "has the name of an egress mode"),
    ('egress_internal = ["ten-net"]\n', "'ten-net', which is not an address range"),
])
def test_a_bad_preset_or_range_is_one_clear_error(tmp_path: Path, body: str, fragment: str) -> None:
    with pytest.raises(ServiceConfigError) as e:
        load_config(config(tmp_path, body), env={})
    assert fragment in str(e.value), str(e.value)


def test_squid_accepts_the_configuration_the_rules_become(tmp_path: Path) -> None:
    if not Path("/usr/sbin/squid").is_file():
        pytest.fail("this test needs Debian's squid at /usr/sbin/squid (apt-get install squid; .ci/run does)")
    rules = parse_rules(["package-registries", "*.example.com", "git.example.com:8443",
                         {"host": "api.example.com", "methods": ["GET", "HEAD", "OPTIONS"]}])
    text = render(SquidConfig(tmp_path, internal_ok=("10.1.2.0/24",), forbidden_ports=(8080, 8081)),
                  {"abc": (3128, rules), "def": (3129, parse_rules(["registry.npmjs.org"]))})
    (tmp_path / "squid.conf").write_text(text)
    check = subprocess.run(["/usr/sbin/squid", "-k", "parse", "-f", str(tmp_path / "squid.conf")],
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stderr[-2000:]
    assert "WARNING" not in check.stderr and "ERROR" not in check.stderr, check.stderr[-2000:]
    lines = text.splitlines()
    assert lines[-1] == "http_access deny all"
    assert lines.index("http_access deny forbidden") < lines.index("http_access deny upgrade") < min(
        i for i, line in enumerate(lines) if line.startswith("http_access allow"))
    api = [line for line in lines if line.startswith("http_access allow") and "_methods" in line]
    assert api and all("!CONNECT" in line for line in api), "a methods rule never allows a tunnel"
    assert "acl forbidden port 3128 3129 8080 8081" in lines


def test_a_rule_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        parse_rules(["http://registry.example.com"])
