#!/usr/bin/env bash
# Fetches the aarch64 libraries the cross-built runtime links (abseil, xxHash and nlohmann-json from Debian's
# arm64 packages) and unpacks them into a sysroot folder, without installing them: installing
# libabsl-dev:arm64 would pull libc6:arm64 into dpkg, which conflicts with packages of the host.
# The compiler, its libc and libstdc++ come from g++-aarch64-linux-gnu (/usr/aarch64-linux-gnu).
#   scripts/cross_sysroot.sh [dir]     default dir: /opt/kiln/sysroot-aarch64
# Needs root (or sudo) once, to enable the arm64 architecture in apt's package lists.
# tests/cross/run_aarch64_test.sh uses the folder (env KILN_AARCH64_SYSROOT overrides it).
set -euo pipefail
DIR="${1:-/opt/kiln/sysroot-aarch64}"
PACKAGES=(libabsl-dev:arm64 libabsl20220623:arm64 libxxhash-dev:arm64 libxxhash0:arm64
          nlohmann-json3-dev)  # header-only, but its CMake config must point into the sysroot

if [[ -f "$DIR/.complete" ]]; then
  echo "cross_sysroot: $DIR is ready"
  exit 0
fi
SUDO=()
if [[ "$(id -u)" -ne 0 ]]; then SUDO=(sudo); fi
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  echo "cross_sysroot: enabling the arm64 architecture in apt (package lists only)"
  "${SUDO[@]}" dpkg --add-architecture arm64
  "${SUDO[@]}" apt-get update -q -o DPkg::Lock::Timeout=600 </dev/null
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
chmod 777 "$tmp"  # apt-get download runs as _apt when it can
if ! (cd "$tmp" && apt-get download -q "${PACKAGES[@]}" </dev/null); then
  "${SUDO[@]}" apt-get update -q -o DPkg::Lock::Timeout=600 </dev/null
  (cd "$tmp" && apt-get download -q "${PACKAGES[@]}" </dev/null)
fi
"${SUDO[@]}" mkdir -p "$DIR"
for deb in "$tmp"/*.deb; do "${SUDO[@]}" dpkg-deb -x "$deb" "$DIR"; done
"${SUDO[@]}" touch "$DIR/.complete"
echo "cross_sysroot: unpacked ${PACKAGES[*]} into $DIR"
