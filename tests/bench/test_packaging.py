"""Packaging check (CI): the layer's pinned dependencies install for the Lambda runtime (python3.13, arm64) and
every handler imports in a fresh interpreter that sees only Lambda's sys.path (function, layer, runtime boto3).

The installs are cached under .venv/lambda-packages keyed by the requirements' hash. Import time is recorded by
`python -m bench --only cold_start`, not asserted here (timings are not test assertions)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import packaging

# A cold cache runs pip (minutes on a busy machine); later runs reuse .venv/lambda-packages.
INSTALL_TIMEOUT = 900


@pytest.mark.timeout(INSTALL_TIMEOUT)
def test_layer_installs_for_the_lambda_platform():
    target = packaging.lambda_install()
    assert (target / "aws_lambda_powertools" / "__init__.py").is_file()
    assert (target / "yaml" / "__init__.py").is_file()  # the kubeconfig modes
    assert not (target / "kubernetes").exists()  # the functions use ccm.k8s.rest: 430 ms of import and 97 MB saved
    # the extension modules pip chose are the runtime's: CPython 3.13 on aarch64, nothing for this machine
    extensions = [p.name for p in target.rglob("*.so")]
    assert extensions and all("cpython-313-aarch64" in name for name in extensions), extensions
    assert not (target / "boto3").exists()  # the runtime provides boto3; the layer must not ship (and pin) it


@pytest.mark.timeout(INSTALL_TIMEOUT)
def test_every_handler_imports_with_only_the_lambda_path():
    layer_deps, runtime = packaging.local_install()
    handlers = packaging.functions()
    assert {"services", "nodes", "routes"} <= set(handlers)
    for name, directory in handlers.items():
        probe = packaging.import_handler(directory, layer_deps, runtime)
        # Resolved from the installs and the layer, never from the development virtualenv: at import, and after
        # the first invocation's setup (runtime, Kubernetes client from a kubeconfig, AWS clients): boto3 and
        # urllib3 from the runtime, PyYAML from the layer. The kubernetes package is never loaded.
        for origins in (probe["origins"], probe["cold_origins"]):
            assert Path(origins["ccm"]).is_relative_to(packaging.LAYER_CODE), (name, origins)
            assert origins["kubernetes"] is None, (name, origins)
        cold = probe["cold_origins"]
        assert Path(cold["boto3"]).is_relative_to(runtime), (name, cold)
        assert Path(cold["urllib3"]).is_relative_to(runtime), (name, cold)
        if name == "teardown":  # the stack's custom resource talks to AWS only: no Kubernetes client, no PyYAML
            assert cold["yaml"] is None, (name, cold)
            continue
        assert Path(cold["yaml"]).is_relative_to(layer_deps), (name, cold)
