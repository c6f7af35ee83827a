#!/usr/bin/env bash
# Installs the tools that build the packages, each only when it is missing or at another
# version, so a second run costs a few version checks:
#   cargo-zigbuild and cargo-deb (cargo install, pinned, --locked),
#   zig (the `ziglang` package from PyPI, pinned, into a virtual environment of its own:
#     Debian's python3 refuses `pip install` outside one, PEP 668 "externally-managed-environment"),
#   objdump and dpkg-deb (Debian's binutils and dpkg), python3-venv where python3 lacks venv.
# Extra Debian packages to make sure of can be named as arguments (the tests use this).
#
# `packaging/tools.sh --zig-python` installs nothing and prints the python that cargo-zigbuild
# must run zig through (its CARGO_ZIGBUILD_PYTHON_PATH), or nothing when `zig` is on PATH.
set -euo pipefail

CARGO_DEB_VERSION=3.8.0
CARGO_ZIGBUILD_VERSION=0.24.1
ZIGLANG_VERSION=0.17.1
# The virtual environment holding zig: per user, outside the worktree, so `cargo clean` or a
# fresh clone does not download zig again. SELFHEAL_ZIG_VENV moves it.
ZIG_VENV=${SELFHEAL_ZIG_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/selfheal/ziglang-$ZIGLANG_VERSION}

say() { echo "packaging/tools.sh: $*" >&2; }

if [ "${1:-}" = "--zig-python" ]; then
  command -v zig >/dev/null || echo "$ZIG_VENV/bin/python3"
  exit 0
fi

apt_install() {
  [ "$(id -u)" -eq 0 ] || { say "installing $* needs root (or install it yourself)"; exit 1; }
  if [ -z "${APT_UPDATED:-}" ]; then apt-get update -qq; APT_UPDATED=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

# Debian packages: binutils (objdump), dpkg (dpkg-deb), plus what the caller asks for; and for
# zig (unless it is on PATH) a python3 that can make a virtual environment with pip in it
# (Debian splits venv's ensurepip into python3-venv).
missing=()
for pkg in binutils dpkg "$@"; do installed "$pkg" || missing+=("$pkg"); done
if ! command -v zig >/dev/null && ! [ -x "$ZIG_VENV/bin/python3" ]; then
  command -v python3 >/dev/null || missing+=(python3)
  python3 -c 'import venv, ensurepip' 2>/dev/null || installed python3-venv || missing+=(python3-venv)
fi
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

# zig, as cargo-zigbuild finds it: `zig` on PATH, else `$CARGO_ZIGBUILD_PYTHON_PATH -m
# ziglang` (build-deb.sh points that at the virtual environment's python).
if ! command -v zig >/dev/null; then
  have=$("$ZIG_VENV/bin/python3" -m ziglang version 2>/dev/null || true)
  if [ "$have" != "$ZIGLANG_VERSION" ]; then
    say "pip install ziglang==$ZIGLANG_VERSION into the virtual environment $ZIG_VENV (have: ${have:-none})"
    rm -rf "$ZIG_VENV"
    mkdir -p "$(dirname "$ZIG_VENV")"
    python3 -m venv "$ZIG_VENV"
    "$ZIG_VENV/bin/python3" -m pip install --quiet --disable-pip-version-check "ziglang==$ZIGLANG_VERSION"
    have=$("$ZIG_VENV/bin/python3" -m ziglang version)
    [ "$have" = "$ZIGLANG_VERSION" ] || { say "zig in $ZIG_VENV says $have, want $ZIGLANG_VERSION"; exit 1; }
  fi
fi
