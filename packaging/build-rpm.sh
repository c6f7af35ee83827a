#!/usr/bin/env bash
# Builds the selfheal RPM (CentOS 7 / RHEL 7 and later) from the files of the .deb that
# packaging/build-deb.sh made, so both carry the same glibc 2.17 binary, man page,
# completions, configuration, PHP helpers, Prometheus rules and systemd units:
#   1. unpacks the .deb,
#   2. makes the RHEL forms of what differs: the cron line and selfheal.service run as apache
#      (RHEL's httpd and php-fpm user) instead of www-data,
#   3. rpmbuild -bb packaging/rpm/selfheal.spec (xz payload, which rpm 4.11 reads), and
#      prints the package path on the last line of stdout.
# packaging/test-rpm.sh checks the result against the .deb.
# Usage: packaging/build-rpm.sh PACKAGE.deb
set -euo pipefail
cd "$(dirname "$0")/.."

deb=$(realpath "${1:?usage: packaging/build-rpm.sh PACKAGE.deb}")
OUT=target/rpm
DEB_USER=www-data
RPM_USER=apache
say() { echo "build-rpm: $*" >&2; }
die() { say "$*"; exit 1; }

command -v rpmbuild >/dev/null || packaging/tools.sh rpm

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
dpkg-deb -x "$deb" "$work/root"
version=$(dpkg-deb -f "$deb" Version)
upstream=${version%-*}
release=${version##*-}
[ -n "$upstream" ] && [ -n "$release" ] && [ "$upstream" != "$version" ] ||
  die "cannot split the .deb's version '$version' into version and release"

# The one line of each file that names the user; anything else in them stays the .deb's.
cron=$work/root/etc/cron.d/selfheal
unit=$work/root/lib/systemd/system/selfheal.service
[ "$(grep -c "^\*/10 \* \* \* \* $DEB_USER " "$cron")" = 1 ] || die "no single $DEB_USER cron line in the .deb's $cron"
[ "$(grep -c "^User=$DEB_USER\$" "$unit")" = 1 ] || die "no single User=$DEB_USER in the .deb's selfheal.service"
sed -i "s/^\(\*\/10 \* \* \* \*\) $DEB_USER /\1 $RPM_USER /" "$cron"
sed -i "s/^User=$DEB_USER\$/User=$RPM_USER/" "$unit"

mkdir -p "$OUT"
say "rpmbuild -bb packaging/rpm/selfheal.spec ($upstream-$release)"
rpmbuild -bb --quiet \
  --define "_topdir $work/rpmbuild" \
  --define "_rpmdir $PWD/$OUT" \
  --define "_build_name_fmt %%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm" \
  --define "sh_root $work/root" \
  --define "sh_version $upstream" \
  --define "sh_release $release" \
  packaging/rpm/selfheal.spec >&2
rpm=$OUT/selfheal-$upstream-$release.x86_64.rpm
[ -f "$rpm" ] || die "rpmbuild made no $rpm"
say "$(rpm -qp --qf '%{NAME} %{VERSION}-%{RELEASE} %{ARCH}, payload %{PAYLOADCOMPRESSOR}' "$rpm" 2>/dev/null)"
say "$(du -k "$rpm" | cut -f1) KiB"
echo "$rpm"
