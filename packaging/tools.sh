#!/usr/bin/env bash
# Installs the tools that build the .deb, each only when it is missing or at another version,
# so a second run costs a few version checks:
#   cargo-zigbuild and cargo-deb (cargo install, pinned, --locked),
#   zig (the `ziglang` package from PyPI, into the python3 on PATH),
#   objdump and dpkg-deb (Debian's binutils and dpkg).
# Extra Debian packages to make sure of can be named as arguments (the test uses this).
set -euo pipefail

CARGO_DEB_VERSION=3.8.0
CARGO_ZIGBUILD_VERSION=0.24.1
ZIGLANG_VERSION=0.17.1

say() { echo "packaging/tools.sh: $*" >&2; }

apt_install() {
  [ "$(id -u)" -eq 0 ] || { say "installing $* needs root (or install it yourself)"; exit 1; }
  if [ -z "${APT_UPDATED:-}" ]; then apt-get update -qq; APT_UPDATED=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# Debian packages: binutils (objdump), dpkg (dpkg-deb), plus what the caller asks for.
missing=()
for pkg in binutils dpkg "$@"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  say "apt-get install ${missing[*]}"
  apt_install "${missing[@]}"
fi

# cargo subcommands, pinned.
cargo_tool() { # crate version binary
  local have
  have=$("$3" --version 2>/dev/null | awk '{print $NF}' || true)
  if [ "$have" != "$2" ]; then
    say "cargo install $1@$2 (have: ${have:-none})"
    cargo install --quiet --locked "$1@$2"
  fi
}
cargo_tool cargo-zigbuild "$CARGO_ZIGBUILD_VERSION" cargo-zigbuild
cargo_tool cargo-deb "$CARGO_DEB_VERSION" cargo-deb

# zig, as cargo-zigbuild finds it: `zig` on PATH, else `python3 -m ziglang`.
if ! command -v zig >/dev/null; then
  have=$(python3 -m ziglang version 2>/dev/null || true)
  if [ "$have" != "$ZIGLANG_VERSION" ]; then
    say "pip install ziglang==$ZIGLANG_VERSION (have: ${have:-none})"
    python3 -m pip install --quiet --disable-pip-version-check "ziglang==$ZIGLANG_VERSION"
  fi
fi
