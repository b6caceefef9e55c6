#!/usr/bin/env bash
# Create or reuse .venv and install the pinned dev environment. Idempotent and quiet when up to date.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# Debian splits venv's pip bootstrap into python3-venv: a fresh machine may lack it.
if [ ! -x .venv/bin/python ] && ! "$PY" -c 'import ensurepip' 2>/dev/null; then
  sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.requirements.sha
want=$(cat requirements-dev.txt layers/ccm/requirements.txt | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements-dev.txt
  echo "$want" > "$stamp"
fi
# The SAM CLI lives in a virtualenv of its own (its dependency pins differ from ours); tests run `sam build` with it.
sam_stamp=.venv/sam/.requirements.sha
sam_want=$(sha256sum requirements-sam.txt | cut -d' ' -f1)
if [ "$(cat "$sam_stamp" 2>/dev/null)" != "$sam_want" ]; then
  "$PY" -m venv .venv/sam
  .venv/sam/bin/python -m pip install -q --disable-pip-version-check -r requirements-sam.txt
  echo "$sam_want" > "$sam_stamp"
fi
# Make the layer's package (ccm) and the repo's packages (watcher, devstack, bench) importable,
# exactly as the Lambda layer puts ccm on sys.path.
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
printf '%s\n%s\n' "$PWD/layers/ccm" "$PWD" > "$site/serverless_ccm.pth"
