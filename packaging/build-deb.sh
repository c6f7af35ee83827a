#!/usr/bin/env bash
# Builds the selfheal .deb from a clean checkout, for legacy hosts:
#   1. installs the build tools when missing (packaging/tools.sh),
#   2. builds /usr/bin/selfheal against glibc $GLIBC_BASELINE with cargo-zigbuild (zig links
#      against that glibc's symbol versions; rustls, bundled SQLite: no OpenSSL, no libsqlite3),
#   3. checks the binary: highest GLIBC_ symbol version <= the baseline, and only the shared
#      libraries that libc6 provides (what the hand-written Depends: promises),
#   4. generates from that binary the shell completions it prints, and the copyright file
#      with the statically linked crates,
#   5. `cargo deb --no-build`, and prints the package path on the last line of stdout.
# Usage: packaging/build-deb.sh [--skip-tools]
set -euo pipefail
cd "$(dirname "$0")/.."

GLIBC_BASELINE=2.17
TRIPLE=x86_64-unknown-linux-gnu
OUT=target/debian
ASSETS=target/deb-assets
say() { echo "build-deb: $*" >&2; }
die() { say "$*"; exit 1; }

[ "${1:-}" = "--skip-tools" ] || packaging/tools.sh

# `-C linker=` in RUSTFLAGS silently replaces zig's linker, and with it the glibc baseline.
case "${RUSTFLAGS:-} ${CARGO_ENCODED_RUSTFLAGS:-}" in
  *linker*) die "RUSTFLAGS sets a linker; that would bypass zig and the glibc $GLIBC_BASELINE baseline" ;;
esac

# zig from packaging/tools.sh's virtual environment, unless a zig is on PATH.
zig_python=$(packaging/tools.sh --zig-python)
if [ -n "$zig_python" ]; then
  [ -x "$zig_python" ] || die "no zig: neither on PATH nor at $zig_python (run packaging/tools.sh)"
  export CARGO_ZIGBUILD_PYTHON_PATH=$zig_python
fi

say "building for $TRIPLE.$GLIBC_BASELINE (cargo zigbuild --release)"
cargo zigbuild --locked --release --target "$TRIPLE.$GLIBC_BASELINE" >&2
BIN=target/$TRIPLE/release/selfheal
[ -x "$BIN" ] || die "no binary at $BIN"

# A wrong suffix makes zig fall back to its newest glibc without a word: check the result.
highest=$(objdump -T "$BIN" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n1)
[ -n "$highest" ] || die "no GLIBC_ symbol versions in $BIN (not a glibc binary?)"
if [ "$(printf '%s\n%s\n' "$highest" "$GLIBC_BASELINE" | sort -V | tail -n1)" != "$GLIBC_BASELINE" ]; then
  die "$BIN needs GLIBC_$highest, above the $GLIBC_BASELINE baseline"
fi
say "highest glibc symbol version: GLIBC_$highest"

# Every shared library must come from libc6; anything else (libssl, libsqlite3, libgcc_s…)
# would need its own Depends: entry and may be missing or too old on a legacy host.
needed=$(objdump -p "$BIN" | awk '$1 == "NEEDED" {print $2}' | sort | tr '\n' ' ')
for lib in $needed; do
  case "$lib" in
    libc.so.6 | libm.so.6 | libpthread.so.0 | libdl.so.2 | librt.so.1 | ld-linux-x86-64.so.2) ;;
    *) die "$BIN needs $lib, which libc6 does not provide (Depends: in Cargo.toml covers libc6 only)" ;;
  esac
done
say "shared libraries: $needed"

rm -rf "$ASSETS"
mkdir -p "$ASSETS/completions"

# Shell completions, printed by the binary being packaged.
"$BIN" completions bash >"$ASSETS/completions/selfheal.bash"
"$BIN" completions zsh >"$ASSETS/completions/_selfheal"
"$BIN" completions fish >"$ASSETS/completions/selfheal.fish"
for f in "$ASSETS"/completions/*; do [ -s "$f" ] || die "empty completion script $f"; done

# The copyright file, with every crate linked into the binary (no build scripts, no proc-macros).
crates=$(cargo tree --locked --target "$TRIPLE" -e normal,no-proc-macro --prefix none \
  --format ' {p}: {l}' | sed -e 's/ ([^)]*)//g' -e 's/ v\([0-9]\)/ \1/' \
  -e 's/: *$/: see the license file in the crate/' |
  grep -v '^ selfheal ' | sort -u)
[ -n "$crates" ] || die "cargo tree listed no crates"
awk -v crates="$crates" '$0 == " @CRATES@" { print crates; next } { print }' \
  packaging/copyright >"$ASSETS/copyright"

# Symbols are already stripped by the release profile; the linker's .comment goes too.
objcopy --remove-section=.comment "$BIN"

say "cargo deb --no-build"
deb=$(cargo deb --locked --no-build --no-strip --target "$TRIPLE" --output "$OUT/" | tail -n1)
[ -f "$deb" ] || die "cargo deb did not report a package (got: $deb)"

# cargo-deb writes no md5sums; add them (conffiles excluded, as dpkg keeps their sums itself)
# so that `dpkg --verify selfheal` and debsums can check the installed files.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
dpkg-deb -R "$deb" "$work/root"
(
  cd "$work/root"
  find . -path ./DEBIAN -prune -o -type f -print | sed 's|^\./||' | LC_ALL=C sort |
    grep -vxF -f <(sed 's|^/||' DEBIAN/conffiles) | xargs -d '\n' md5sum >DEBIAN/md5sums
)
# Same timestamps as cargo-deb gave the files, for the directories dpkg-deb -R made.
find "$work/root" -exec touch -h -d "@$(stat -c %Y "$work/root/usr/bin/selfheal")" {} +
dpkg-deb --root-owner-group -Zxz --build "$work/root" "$deb" >/dev/null
say "$(dpkg-deb -f "$deb" Package Version Architecture Depends | tr '\n' ' ')"
say "$(du -k "$deb" | cut -f1) KiB"
echo "$deb"
