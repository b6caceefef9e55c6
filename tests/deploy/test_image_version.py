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
