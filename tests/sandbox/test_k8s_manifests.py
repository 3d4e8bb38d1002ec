"""The sandbox NetworkPolicy renderer: allow-list from config, metadata always denied."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from runtime.config import ConfigError, KubernetesSandboxConfig
from sandbox.k8s_manifests import main, render_network_policies


def _config(**network: object) -> KubernetesSandboxConfig:
    network.setdefault("allow_dns", True)
    return KubernetesSandboxConfig.model_validate({"network": network})


def test_allow_list_rules_get_metadata_exceptions() -> None:
    config = _config(
        egress=[
            {"cidr": "0.0.0.0/0", "ports": [443]},
            {"cidr": "::/0", "ports": [443]},
            {"cidr": "10.20.0.0/16", "ports": [5432, 6379]},
            {"cidr": "100.64.0.0/10"},
        ]
    )
    _deny, allow = render_network_policies(config)
    kubernetes_validate.validate(allow, "1.35", strict=True)
    rules = allow["spec"]["egress"]
    assert rules[0]["ports"] == [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
    # A broad rule never opens private, loopback or link-local ranges (cluster
    # pods and services, the API server, node services); metadata is inside them.
    assert rules[1] == {
        "to": [
            {
                "ipBlock": {
                    "cidr": "0.0.0.0/0",
                    "except": [
                        "10.0.0.0/8",
                        "100.64.0.0/10",
                        "127.0.0.0/8",
                        "169.254.0.0/16",
                        "172.16.0.0/12",
                        "192.168.0.0/16",
                    ],
                }
            }
        ],
        "ports": [{"protocol": "TCP", "port": 443}],
    }
    assert rules[2]["to"][0]["ipBlock"] == {
        "cidr": "::/0",
        "except": ["fc00::/7", "fe80::/10", "::1/128"],
    }
    assert rules[3]["to"][0]["ipBlock"] == {"cidr": "10.20.0.0/16"}
    assert [p["port"] for p in rules[3]["ports"]] == [5432, 6379]
    assert rules[4] == {
        "to": [{"ipBlock": {"cidr": "100.64.0.0/10", "except": ["100.100.100.200/32"]}}]
    }


@pytest.mark.parametrize("cidr", ["169.254.169.254/32", "169.254.169.254", "fd00:ec2::254/128"])
def test_metadata_can_never_be_allowed(cidr: str) -> None:
    with pytest.raises(ConfigError, match="cloud metadata endpoint"):
        render_network_policies(_config(egress=[{"cidr": cidr}]))


def test_bad_cidr_names_the_entry() -> None:
    with pytest.raises(ConfigError, match=r"network.egress\[0\]: 'nope' is not a CIDR"):
        render_network_policies(_config(egress=[{"cidr": "nope"}]))


def test_dns_is_off_by_default() -> None:
    _deny, allow = render_network_policies(KubernetesSandboxConfig())
    assert allow["spec"]["egress"] == []  # the provider needs no DNS in the pod
    _deny, allow = render_network_policies(_config(allow_dns=False))
    assert allow["spec"]["egress"] == []


def test_cli_renders_from_a_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "sandbox": {
                    "kubernetes": {
                        "namespace": "agents",
                        "network": {"egress": [{"cidr": "0.0.0.0/0", "ports": [443]}]},
                    }
                }
            }
        )
    )
    assert main(["--config", str(config)]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["metadata"]["namespace"] for d in docs] == ["agents", "agents"]
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        yaml.safe_dump(
            {"sandbox": {"kubernetes": {"network": {"egress": [{"cidr": "169.254.169.254/32"}]}}}}
        )
    )
    assert main(["--config", str(bad)]) == 2
    assert "always denied" in capsys.readouterr().err
