#!/usr/bin/env bash
# Install Debian's chromium for tests/devstack/test_dashboard.py (it opens the devstack dashboard in a real
# headless browser). Debian/Ubuntu, as root (or via sudo). Idempotent: does nothing when chromium is on PATH.
# .ci/run calls it; developers run it once.
set -euo pipefail
command -v chromium >/dev/null && exit 0
sudo=()
[ "$(id -u)" -eq 0 ] || sudo=(sudo)
started=$SECONDS
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends chromium >/dev/null
echo "installed chromium in $((SECONDS - started)) s" >&2
