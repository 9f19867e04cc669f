#!/usr/bin/env bash
# Build the dpfed image (deploy/Containerfile) with podman or docker, without needing a registry.
#
#   deploy/build-image.sh [--engine podman|docker] [--tag dpfed:0.1.0] [--base IMAGE] [--local-base]
#
# Base image: --base IMAGE if given; else docker.io/library/python:3.11-slim if it is present or can be
# pulled; else (no registry reachable, --local-base) a Debian bookworm root file system made here by
# debootstrap from Debian's package mirror (python3 3.11, python3-venv, ca-certificates) and imported as
# localhost/dpfed-base:bookworm (made once, then reused).
# Python packages: the host's pip (with its own index, CA bundle and settings: `pip config list`)
# downloads dpfed's dependencies as wheels for the base image's Python into a cache folder, pinned to
# the versions installed on the host when it has them; the build installs only from that folder
# (`pip install --no-index`), so the build itself needs no network. A second build reuses the base,
# the wheels and the dependency layer and takes seconds.
# Environment: DPFED_IMAGE_CACHE (default ~/.cache/dpfed-image), DEBIAN_MIRROR
# (default http://deb.debian.org/debian), DPFED_PULL_TIMEOUT (seconds, default 30). On hosts that
# refuse crun or podman's default ulimits: export CONTAINERS_CONF=$PWD/deploy/podman/containers.conf
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
engine=${DPFED_ENGINE:-}
tag=dpfed:0.1.0
base=
local_base=0
default_base=docker.io/library/python:3.11-slim
local_base_tag=localhost/dpfed-base:bookworm
cache=${DPFED_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dpfed-image}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
while [ $# -gt 0 ]; do
  case $1 in
    --engine) engine=$2; shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    --base) base=$2; shift 2 ;;
    --local-base) local_base=1; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "build-image.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ -z "$engine" ]; then
  if command -v podman >/dev/null; then engine=podman
  elif command -v docker >/dev/null; then engine=docker
  else echo "build-image.sh: neither podman nor docker is installed" >&2; exit 1; fi
fi
eng=("$engine")
log() { echo "build-image.sh: $*" >&2; }
have_image() { "${eng[@]}" image inspect "$1" >/dev/null 2>&1; }

make_local_base() {
  if have_image "$local_base_tag"; then log "base $local_base_tag already made"; return; fi
  command -v debootstrap >/dev/null || { log "debootstrap is needed to make a base image (apt-get install debootstrap)"; exit 1; }
  local root="$cache/rootfs"
  # an interrupted debootstrap may leave /proc or /sys mounted inside: unmount before removing
  { findmnt -rn -o TARGET | grep "^$root/" || true; } | sort -r | xargs -r -n1 umount -l
  rm -rf "$root"; mkdir -p "$cache/debs" "$root"
  log "debootstrap bookworm from $mirror (a few minutes, once)"
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    --cache-dir="$cache/debs" bookworm "$root" "$mirror" >"$cache/debootstrap.log" 2>&1 \
    || { tail -20 "$cache/debootstrap.log" >&2; exit 1; }
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" -c --exclude='./proc/*' --exclude='./sys/*' --exclude='./dev/*' . | "${eng[@]}" import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' --change 'CMD ["/bin/bash"]' - "$local_base_tag" >/dev/null
  rm -rf "$root"
  log "made $local_base_tag"
}

if [ -z "$base" ] && [ "$local_base" = 0 ] && ! have_image "$default_base" && have_image "$local_base_tag"; then
  base=$local_base_tag   # made by an earlier run (remove it, or pass --base, to try the registry again)
fi
if [ -z "$base" ] && [ "$local_base" = 0 ]; then
  if have_image "$default_base" || timeout "${DPFED_PULL_TIMEOUT:-30}" "${eng[@]}" pull -q "$default_base" >/dev/null 2>&1; then
    base=$default_base
  else
    log "cannot pull $default_base (no registry reachable?): making a base from Debian packages"
    local_base=1
  fi
fi
if [ -z "$base" ]; then make_local_base; base=$local_base_tag; fi

# Python version of the base image: the wheels are downloaded for it.
pyver=$("${eng[@]}" run --rm --network none --entrypoint python3 "$base" -c \
  'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')
ctx="$cache/context"
wheels="$ctx/wheels"
mkdir -p "$wheels"
# Requirements: pyproject's dependencies, pinned to the host's installed versions where it has them.
python3 - "$repo/pyproject.toml" >"$ctx/requirements.new" <<'EOF'
import sys
try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib
from importlib import metadata
from packaging.requirements import Requirement
deps = tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]
deps += ["setuptools>=68", "wheel"]   # to build dpfed itself inside the image, offline
for line in deps:
    req = Requirement(line)
    try:
        version = metadata.version(req.name)
    except metadata.PackageNotFoundError:
        version = None
    pin = f"=={version}" if version and req.specifier.contains(version, prereleases=True) else str(req.specifier)
    marker = f"; {req.marker}" if req.marker else ""
    print(f"{req.name}{pin}{marker}")
EOF
key="$pyver $(cat "$ctx/requirements.new")"
if [ "$(cat "$ctx/wheels.key" 2>/dev/null)" != "$key" ]; then
  log "downloading wheels for cp$pyver with the host's pip"
  rm -f "$wheels"/*.whl
  python3 -m pip download -q --only-binary=:all: --python-version "$pyver" --implementation cp \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_31_x86_64 --platform linux_x86_64 --platform any \
    -d "$wheels" -r "$ctx/requirements.new" 2> >(grep -v 'is ignored: it is neither a file nor a directory' >&2)
  echo "$key" >"$ctx/wheels.key"
fi
mv "$ctx/requirements.new" "$ctx/requirements.txt"
# The source, exactly what the package installs (a fresh copy: the build cache compares contents).
rm -rf "${ctx:?}"/{dpfed,coordinator,party,protos}
(cd "$repo" && tar -c --exclude=__pycache__ --exclude='*.pyc' dpfed coordinator party protos) | tar -C "$ctx" -x
cp "$repo/pyproject.toml" "$repo/README.md" "$here/Containerfile" "$ctx/"
log "building $tag on $base with $engine"
"${eng[@]}" build -q -f "$ctx/Containerfile" --build-arg "BASE=$base" -t "$tag" "$ctx" >/dev/null
log "built $tag"
echo "$tag"
