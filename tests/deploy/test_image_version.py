"""One version everywhere: pyproject.toml's is the watcher image's tag (build script, kustomize), its label
(Dockerfile) and the newest release of CHANGELOG.md. tests/deploy/test_watcher_image.py checks the built image."""

from __future__ import annotations

import re
import tomllib

import pytest

from tests.deploy.conftest import REPO, find, render

VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def test_the_version_is_semantic() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", VERSION), VERSION


def test_the_dockerfile_labels_the_image_with_it() -> None:
    text = (REPO / "watcher/Dockerfile").read_text()
    assert re.findall(r"^ARG VERSION=(\S+)$", text, re.M) == [VERSION]
    assert 'org.opencontainers.image.version="${VERSION}"' in text


def test_the_build_script_tags_with_it() -> None:
    text = (REPO / "scripts/build-watcher-image.sh").read_text()
    assert '["project"]["version"]' in text and 'TAG="localhost/$IMAGE:$VERSION"' in text
    assert '--build-arg "VERSION=$VERSION"' in text


@pytest.mark.parametrize("target", ["base", "overlays/irsa", "overlays/pod-identity"])
def test_the_manifests_deploy_it(target: str) -> None:
    (container,) = find(render(target), "Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"serverless-ccm-watcher:{VERSION}"


def test_the_changelog_has_it_as_the_newest_release() -> None:
    text = (REPO / "CHANGELOG.md").read_text()
    sections = re.findall(r"^## \[([^\]]+)\](.*)$", text, re.M)
    assert sections[0][0] == "Unreleased", "Keep a Changelog: an Unreleased section on top"
    version, rest = sections[1]
    assert version == VERSION and re.fullmatch(r" - \d{4}-\d{2}-\d{2}", rest), sections[1]
    assert f"[{VERSION}]:" in text and "[Unreleased]:" in text  # the comparison links at the bottom


def test_the_image_names_its_commit_and_no_placeholder_source() -> None:
    dockerfile = (REPO / "watcher/Dockerfile").read_text()
    script = (REPO / "scripts/build-watcher-image.sh").read_text()
    assert 'org.opencontainers.image.revision="${REVISION}"' in dockerfile
    assert "REVISION=$(git rev-parse HEAD" in script and '--build-arg "REVISION=$REVISION"' in script
    assert "OWNER" not in dockerfile and "OWNER" not in (REPO / "CHANGELOG.md").read_text()


def test_the_default_base_is_pinned_and_runs_the_functions_python() -> None:
    """The build script's default is the Dockerfile's base, pinned by digest, with the Lambda runtime's Python."""
    script = (REPO / "scripts/build-watcher-image.sh").read_text()
    assert "BASE=${BASE:-registry}" in script
    (base,) = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", (REPO / "watcher/Dockerfile").read_text(), re.M)
    assert re.search(r"@sha256:[0-9a-f]{64}$", base), base
    runtimes = set(re.findall(r"Runtimes?: \[?python(3\.\d+)", (REPO / "template.yaml").read_text()))
    assert len(runtimes) == 1, runtimes
    assert base.startswith(f"python:{runtimes.pop()}."), base
    # The offline base is Debian trixie, whose python3 is 3.13 too.
    assert '    trixie "$mnt"' in script
