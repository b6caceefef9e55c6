#!/usr/bin/env bash
# Set up (or reuse) .venv and run every check CI runs: lint, types, and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
# System tools some tests drive (idempotent, nothing to do once present; apt-get as root or through sudo):
# buildah, debootstrap, podman, runc build and run the watcher image (tests/deploy/test_watcher_image.py);
# chromium opens the devstack dashboard headless (tests/devstack/test_dashboard.py).
bash scripts/install-image-tools.sh
bash scripts/install-browser.sh
export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_DEFAULT_REGION=us-east-1
unset AWS_PROFILE AWS_ENDPOINT_URL || true
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy layers/ccm/ccm functions watcher devstack bench
# No two-way ties between packages (pyproject.toml [tool.importlinter]).
PYTHONPATH=layers/ccm .venv/bin/lint-imports
.venv/bin/pytest -q "$@"
