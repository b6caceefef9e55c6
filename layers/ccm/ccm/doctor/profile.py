"""Did the stack get what its samconfig profile says? `sam deploy --config-env P --parameter-overrides X=1` makes
the SAM CLI REPLACE the profile's whole `parameter_overrides` with the command line's (it does not merge), so a
self-managed profile can silently deploy the template defaults (KubeAuthMode=eks ...). Read + pure check."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from ccm.doctor.findings import Finding, fail, ok

_PAIR = re.compile(r'(\w+)=(?:"((?:[^"\\]|\\.)*)"|(\S+))')


def profile_parameters(samconfig: Path, profile: str) -> dict[str, str]:
    """The `parameter_overrides` of `[<profile>.deploy.parameters]` as a dict (KeyError: no such profile)."""
    config = tomllib.loads(samconfig.read_text())
    text = config[profile]["deploy"]["parameters"].get("parameter_overrides", "")
    if isinstance(text, list):  # the SAM CLI also accepts a list of "Key=Value" strings
        text = " ".join(text)
    return {m.group(1): m.group(2) if m.group(2) is not None else m.group(3) for m in _PAIR.finditer(text)}


def check_profile(profile: str, wanted: dict[str, str], deployed: dict[str, str]) -> list[Finding]:
    """FAIL for every parameter the profile sets that the stack has with another value."""
    differing = {k: (v, deployed.get(k)) for k, v in wanted.items() if deployed.get(k) != v}
    if not differing:
        return [ok("samconfig.profile", f"the stack has the {len(wanted)} parameters profile {profile!r} sets")]
    listed = ", ".join(f"{k}: profile {v!r}, stack {d!r}" for k, (v, d) in sorted(differing.items()))
    return [
        fail(
            "samconfig.profile",
            f"the stack differs from profile {profile!r}: {listed}",
            f"sam deploy --config-env {profile} without --parameter-overrides (it replaces the profile's list), "
            "or put the values into the profile",
        )
    ]
