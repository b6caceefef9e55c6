#!/usr/bin/env bash
# Build the watcher image with buildah (no Docker engine needed), tagged with pyproject.toml's version and labelled
# with it and the git commit (org.opencontainers.image.version / .revision).
#
#   scripts/build-watcher-image.sh              # the Dockerfile's base: python:3.13 slim, pinned by digest
#   BASE=local scripts/build-watcher-image.sh   # offline: a base made here from Debian trixie packages (Python 3.13)
#
# Both bases carry the Lambda functions' Python minor (template.yaml Runtime: python3.13).
# Needs root (or a rootless buildah set-up), buildah and, for the local base, debootstrap:
#   apt-get install -y --no-install-recommends buildah debootstrap
# The local base is a minimal Debian trixie (debootstrap, --variant=minbase) with python3 (3.13), venv support
# and CA certificates, committed as localhost/serverless-ccm-python:trixie and reused by later builds
# (REBUILD_BASE=1 makes it again). It is not pinned by digest (debootstrap takes the mirror's current packages):
# use it where no container registry is reachable. The image is rebuilt only when its inputs changed (FORCE=1
# always): the label serverless-ccm.source-digest holds the sha256 of the Dockerfile, the base, the commit and
# every file it copies.
# Environment: IMAGE (name, default serverless-ccm-watcher), BASE (registry | local), DEBIAN_MIRROR (debootstrap's
# mirror; default: debootstrap's own), BUILDAH_ISOLATION (default chroot: no OCI runtime needed to build).
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${IMAGE:-serverless-ccm-watcher}
BASE=${BASE:-registry}
LOCAL_BASE=localhost/serverless-ccm-python:trixie
export BUILDAH_ISOLATION=${BUILDAH_ISOLATION:-chroot}
VERSION=$(python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
TAG="localhost/$IMAGE:$VERSION"
REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)

for tool in buildah $([ "$BASE" = local ] && echo debootstrap); do
  command -v "$tool" >/dev/null || { echo "error: $tool not found (apt-get install -y $tool)" >&2; exit 2; }
done

build_base() {
  local ctr mnt log started=$SECONDS
  ctr=$(buildah from scratch)
  log=$(mktemp)
  # Whatever happens, leave no working container (and its mount) behind.
  trap 'buildah rm "$ctr" >/dev/null 2>&1 || true; rm -f "$log"' RETURN
  mnt=$(buildah mount "$ctr")
  # shellcheck disable=SC2086  # DEBIAN_MIRROR is optional: unset means debootstrap's default mirror
  debootstrap --variant=minbase --include=python3,python3-venv,python-is-python3,ca-certificates \
    trixie "$mnt" ${DEBIAN_MIRROR:-} >"$log" 2>&1 || {
    echo "error: debootstrap failed:" >&2
    tail -30 "$log" >&2
    return 1
  }
  # What an image never needs: the package archives and lists, documentation and translations.
  rm -rf "$mnt"/var/cache/apt/archives/*.deb "$mnt"/var/lib/apt/lists/* "$mnt"/usr/share/{doc,man,info,locale}/*
  buildah umount "$ctr" >/dev/null
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --env LANG=C.UTF-8 \
    --cmd '["python3"]' --label org.opencontainers.image.description="Debian trixie minbase + python3" "$ctr"
  local previous
  previous=$(buildah inspect --type image --format '{{.FromImageID}}' "$LOCAL_BASE" 2>/dev/null || true)
  buildah commit -q "$ctr" "$LOCAL_BASE" >/dev/null
  [ -z "$previous" ] || buildah rmi "$previous" >/dev/null 2>&1 || true  # its layers stay while an image uses them
  echo "base $LOCAL_BASE built in $((SECONDS - started)) s" >&2
}

build_args=(--build-arg "VERSION=$VERSION" --build-arg "REVISION=$REVISION")
# pip in the build trusts what this host trusts (a proxy's CA, a private index), not only the base's bundle.
HOST_CA=${HOST_CA:-/etc/ssl/certs/ca-certificates.crt}
if [ -f "$HOST_CA" ]; then
  build_args+=(--volume "$HOST_CA:/run/host-ca.crt:ro" --build-arg PIP_CERT=/run/host-ca.crt)
fi
[ -n "${PIP_INDEX_URL:-}" ] && build_args+=(--build-arg "PIP_INDEX_URL=$PIP_INDEX_URL")
if [ "$BASE" = local ]; then
  if [ -n "${REBUILD_BASE:-}" ] || ! buildah inspect --type image "$LOCAL_BASE" >/dev/null 2>&1; then
    build_base
  fi
  build_args+=(--build-arg "PYTHON_IMAGE=$LOCAL_BASE" --pull=never)
  base_id=$(buildah inspect --type image --format '{{.FromImageID}}' "$LOCAL_BASE")
else
  base_id=$(sed -n 's/^ARG PYTHON_IMAGE=//p' watcher/Dockerfile)
fi

# The inputs of the build: the Dockerfile, its ignore file, the base, and the files the ignore file lets through.
sources=$(sed -n 's/^!//p' watcher/Dockerfile.dockerignore)
# shellcheck disable=SC2086  # the patterns are globs on purpose
digest=$( (echo "$base_id $VERSION $REVISION"; sha256sum watcher/Dockerfile watcher/Dockerfile.dockerignore $sources) \
  | sha256sum | cut -c1-64)
if [ -z "${FORCE:-}" ] && [ "$(buildah inspect --type image \
  --format '{{index .OCIv1.Config.Labels "serverless-ccm.source-digest"}}' "$TAG" 2>/dev/null)" = "$digest" ]; then
  echo "$TAG is up to date" >&2
  echo "$TAG"
  exit 0
fi

previous=$(buildah inspect --type image --format '{{.FromImageID}}' "$TAG" 2>/dev/null || true)
started=$SECONDS
# docker format keeps HEALTHCHECK (OCI image configs have no such field).
buildah build --format docker --layers=false "${build_args[@]}" \
  --label "serverless-ccm.source-digest=$digest" \
  -f watcher/Dockerfile --ignorefile watcher/Dockerfile.dockerignore -t "$TAG" . >&2
current=$(buildah inspect --type image --format '{{.FromImageID}}' "$TAG")
# The build moved the tag: drop the image it leaves untagged, so rebuilds do not fill the disk.
if [ -n "$previous" ] && [ "$previous" != "$current" ]; then buildah rmi "$previous" >/dev/null 2>&1 || true; fi
echo "$TAG built in $((SECONDS - started)) s, $(buildah images --format '{{.Size}}' "$TAG")" >&2
echo "$TAG"
