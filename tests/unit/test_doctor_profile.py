"""The doctor's samconfig profile check over the repository's own samconfig.toml (pure)."""

from __future__ import annotations

from pathlib import Path

from ccm.doctor.profile import check_profile, profile_parameters

SAMCONFIG = Path(__file__).resolve().parents[2] / "samconfig.toml"


def test_the_shipped_profiles_parse() -> None:
    managed = profile_parameters(SAMCONFIG, "self-managed")
    assert managed["KubeAuthMode"] == "kubeconfig-secret" and managed["EnableRoutes"] == "true"
    assert profile_parameters(SAMCONFIG, "default")["KubeAuthMode"] == "eks"


def test_every_differing_parameter_is_named_and_a_missing_one_too() -> None:
    wanted = {"KubeAuthMode": "kubeconfig-secret", "EnableRoutes": "true", "LogLevel": "INFO"}
    [finding] = check_profile("self-managed", wanted, {"KubeAuthMode": "eks", "LogLevel": "INFO"})
    assert finding.status == "fail"
    assert "EnableRoutes: profile 'true', stack None" in finding.message
    assert "KubeAuthMode: profile 'kubeconfig-secret', stack 'eks'" in finding.message
    assert "LogLevel" not in finding.message
    [same] = check_profile("self-managed", wanted, dict(wanted))
    assert same.status == "ok"
