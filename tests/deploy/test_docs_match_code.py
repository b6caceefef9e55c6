"""The install and migration docs quote values the code owns; these tests keep the quotes true."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from samtranslator.yaml_helper import yaml_parse

from ccm.aws.lbconfig.notices import LBC_ONLY

ROOT = Path(__file__).resolve().parents[2]


def test_the_first_service_example_uses_the_stacks_default_load_balancer_class() -> None:
    """On EKS a Service without our class goes to the built-in controller, with the same events: the example a new
    user copies must carry exactly the class the stack answers to by default."""
    default = yaml_parse((ROOT / "template.yaml").read_text())["Parameters"]["LoadBalancerClass"]["Default"]
    deploy = (ROOT / "docs" / "deploy.md").read_text()
    first_service = deploy.split("## 8. First Service", 1)[1].split("\n## ", 1)[0]
    # The manifests are heredocs (kubectl apply -f - <<'YAML' ... YAML) inside the shell example.
    blocks = re.findall(r"<<'YAML'\n(.*?)\nYAML\n", first_service, flags=re.S)
    services = [d for b in blocks for d in yaml.safe_load_all(b) if d and d.get("kind") == "Service"]
    assert services, "docs/deploy.md section 8 shows no Service manifest"
    assert {s["spec"].get("loadBalancerClass") for s in services} == {default}


def test_the_migration_table_lists_exactly_the_load_balancer_controller_only_annotations() -> None:
    migration = (ROOT / "docs" / "migration.md").read_text()
    row = next(line for line in migration.splitlines() if line.startswith("| `name`, "))
    listed = set(re.findall(r"`([^`]+)`", row.split(" | ")[0]))
    expected = {name + "<protocol>-<port>" if name.endswith(".") else name for name in LBC_ONLY}
    assert listed == expected
