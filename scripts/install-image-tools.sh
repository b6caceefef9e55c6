#!/usr/bin/env bash
# Install what tests/deploy/test_watcher_image.py needs to build and run the watcher image without a Docker engine:
# buildah (build), debootstrap (the Debian base), podman + runc (run), docker-registry (tests/deploy/test_install.py
# pushes to it and pulls by digest; the test starts it on a loopback port). Debian/Ubuntu, as root (or via sudo).
# Idempotent: does nothing when all are on PATH. .ci/run calls it; developers run it once.
set -euo pipefail
tools=(buildah debootstrap podman runc docker-registry)
missing=()
for tool in "${tools[@]}"; do command -v "$tool" >/dev/null || missing+=("$tool"); done
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=()
[ "$(id -u)" -eq 0 ] || sudo=(sudo)
started=$SECONDS
"${sudo[@]}" apt-get update -qq
# The package names are the tools' names.
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${tools[@]}" >/dev/null
echo "installed ${missing[*]} in $((SECONDS - started)) s" >&2
