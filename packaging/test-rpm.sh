#!/usr/bin/env bash
# Checks the RPM that packaging/build-rpm.sh made from the .deb, on this Debian host (no
# RHEL needed):
#   - the header: xz payload; `rpm -qp --requires` asks for no rpmlib() feature that rpm
#     4.11 (CentOS 7) lacks, no rich (boolean) dependency, no glibc symbol above 2.17;
#   - rpmlint: no error, no warning (packaging/rpm/rpmlint.toml sets RHEL's conventions,
#     packaging/rpm/rpmlintrc filters, each with its reason);
#   - its files against the .deb's: every path, mode and byte the same, except the
#     differences packaging/rpm/deb-differences lists (and each listed one must exist); the PHP
#     helpers and the rules against the source tree;
#   - `rpm --root DIR --noscripts --nodeps` into a scratch root: installed, verified
#     (`rpm -V`), the configuration kept on reinstall (%config(noreplace)), the units pass
#     `systemd-analyze verify` and run the cron line's user and command;
#   - the scriptlets (`rpm -qp --scripts`): `sh -n` and `bash -n`, then run as rpm would run
#     them (install, upgrade, erase) against a scratch passwd/group/shadow, in a private mount
#     namespace whose /etc, /var/lib and /var/log are scratch copies: the system user made
#     only when missing, the state directory given to the cron user and never deleted.
# Usage: packaging/test-rpm.sh PACKAGE.rpm PACKAGE.deb      (root: rpm --root, namespaces)
set -euo pipefail
cd "$(dirname "$0")/.."

rpm=$(realpath "${1:?usage: packaging/test-rpm.sh PACKAGE.rpm PACKAGE.deb}")
deb=$(realpath "${2:?usage: packaging/test-rpm.sh PACKAGE.rpm PACKAGE.deb}")
DIFFERENCES=packaging/rpm/deb-differences
RPM_USER=apache

say() { echo "test-rpm: $*"; }
fail() { echo "test-rpm: FAIL: $*" >&2; exit 1; }
ok() { echo "test-rpm: ok: $*"; }

[ "$(id -u)" -eq 0 ] || fail "needs root (rpm --root, mount namespaces)"
packaging/tools.sh rpm rpmlint systemd util-linux

tmp=$(mktemp -d)
trap 'rm -rf --one-file-system "$tmp"' EXIT

# --- the header ------------------------------------------------------------------------------
[ "$(rpm -qp --qf '%{PAYLOADCOMPRESSOR}' "$rpm")" = xz ] ||
  fail "payload compressed with $(rpm -qp --qf '%{PAYLOADCOMPRESSOR}' "$rpm"), want xz (rpm 4.11 reads no zstd)"
ok "xz payload"

# What rpm 4.11 provides (lib/rpmds.c, rpmlibProvides, 4.11.x): feature and version. A
# package needing a feature not here, or a later version of it, does not install on CentOS 7.
rpm411="
VersionedDependencies 3.0.3-1
CompressedFileNames 3.0.4-1
PayloadIsBzip2 3.0.5-1
PayloadIsXz 5.2-1
PayloadIsLzma 4.4.2-1
PayloadFilesHavePrefix 4.0-1
ExplicitPackageProvide 4.0-1
HeaderLoadSortsTags 4.0.1-1
ScriptletInterpreterArgs 4.0.3-1
PartialHardlinkSets 4.0.4-1
ConcurrentAccess 4.1-1
BuiltinLuaScripts 4.2.2-1
FileDigests 4.6.0-1
FileCaps 4.6.1-1
ScriptletExpansion 4.9.0-1
TildeInVersions 4.10.0-1"
requires=$(rpm -qp --requires "$rpm")
printf '%s\n' "$requires" | sed 's/^/  requires| /'
while read -r name op ver; do
  case "$name" in
    "("*) fail "a rich dependency (rpm >= 4.12): $name $op $ver" ;;
    rpmlib\(*\))
      feature=${name#rpmlib(}
      feature=${feature%)}
      have=$(printf '%s\n' "$rpm411" | awk -v f="$feature" '$1 == f { print $2 }')
      [ -n "$have" ] || fail "needs rpmlib($feature), which rpm 4.11 lacks"
      [ "$op" = "<=" ] || fail "rpmlib($feature) $op $ver: expected <="
      [ "$(printf '%s\n%s\n' "$ver" "$have" | sort -V | tail -n1)" = "$have" ] ||
        fail "needs rpmlib($feature) $ver, rpm 4.11 has $have"
      ;;
    *"(GLIBC_"*)
      v=${name#*(GLIBC_}
      v=${v%%)*}
      [ "$(printf '%s\n2.17\n' "$v" | sort -V | tail -n1)" = 2.17 ] || fail "needs $name, above glibc 2.17"
      ;;
  esac
done <<<"$requires"
ok "requires: every rpmlib() feature within rpm 4.11's, no rich dependency, glibc <= 2.17"

# --- rpmlint ------------------------------------------------------------------------------------
set +e
lint=$(rpmlint -c packaging/rpm/rpmlint.toml -r packaging/rpm/rpmlintrc "$rpm" 2>&1)
rc=$?
set -e
printf '%s\n' "$lint" | sed 's/^/  rpmlint| /'
summary=$(printf '%s\n' "$lint" | grep -E '[0-9]+ errors?, [0-9]+ warnings?' | tail -n1)
[ -n "$summary" ] || fail "rpmlint printed no summary (exit $rc)"
case "$summary" in
  *" 0 errors, 0 warnings"*) ;;
  *) fail "rpmlint: $summary" ;;
esac
[ "$rc" -eq 0 ] || fail "rpmlint exited $rc"
ok "rpmlint: no errors, no warnings"

# --- the files against the .deb's -------------------------------------------------------------
droot=$tmp/deb
dpkg-deb -x "$deb" "$droot"
# "MODE PATH" of every non-directory.
dpkg-deb -c "$deb" | awk '$1 !~ /^d/ { p = $6; sub(/^\./, "", p); print $1, p }' | sort -k2 >"$tmp/deb.list"
rpm -qp --qf '[%{FILEMODES:perms} %{FILENAMES}\n]' "$rpm" | awk '$1 !~ /^d/' | sort -k2 >"$tmp/rpm.list"

# The scratch root the RPM is installed into (without scriptlets or dependencies).
root=$tmp/root
mkdir -p "$root"
rpm --root "$root" --noscripts --nodeps -i "$rpm" 2>&1 | sed 's/^/  rpm -i| /'
rpm --root "$root" -q selfheal >/dev/null || fail "rpm --root: selfheal is not installed in the scratch root"
ok "rpm --root DIR --noscripts --nodeps -i into a scratch root"

declare -A moved edited only_deb only_rpm
while IFS= read -r line; do
  case "$line" in "" | "#"*) continue ;; esac
  reason=${line#* -- }
  [ "$reason" != "$line" ] && [ -n "$reason" ] || fail "$DIFFERENCES: no reason after ' -- ': $line"
  spec=${line%% -- *}
  read -r kind a b <<<"$spec"
  case "$kind" in
    only-deb) only_deb[$a]=1 ;;
    only-rpm) only_rpm[$a]=1 ;;
    moved) moved[$a]=$b ;;
    edited) edited[$a]=$b ;;
    *) fail "$DIFFERENCES: unknown kind '$kind': $line" ;;
  esac
done <"$DIFFERENCES"

declare -A deb_mode rpm_mode
while read -r mode path; do deb_mode[$path]=$mode; done <"$tmp/deb.list"
while read -r mode path; do rpm_mode[$path]=$mode; done <"$tmp/rpm.list"
problems=()
declare -A matched
for path in "${!deb_mode[@]}"; do
  if [ -n "${only_deb[$path]:-}" ]; then
    [ -z "${rpm_mode[$path]:-}" ] || problems+=("$path is listed as only-deb but the RPM has it")
    continue
  fi
  target=${moved[$path]:-$path}
  if [ -z "${rpm_mode[$target]:-}" ]; then
    problems+=("the .deb has $path; the RPM has no $target")
    continue
  fi
  matched[$target]=1
  [ "${deb_mode[$path]}" = "${rpm_mode[$target]}" ] ||
    problems+=("$target: mode ${rpm_mode[$target]} in the RPM, ${deb_mode[$path]} in the .deb")
  if [ -n "${edited[$target]:-}" ]; then
    sed -e "${edited[$target]}" "$droot$path" >"$tmp/expected"
    cmp -s "$droot$path" "$tmp/expected" && problems+=("$DIFFERENCES: the edit of $target changes nothing in the .deb's file")
  else
    cp "$droot$path" "$tmp/expected"
  fi
  cmp -s "$tmp/expected" "$root$target" ||
    problems+=("$target differs from the .deb's $path: $(diff "$tmp/expected" "$root$target" | head -n 5 | tr '\n' ' ' || true)")
done
for path in "${!rpm_mode[@]}"; do
  [ -n "${matched[$path]:-}" ] || [ -n "${only_rpm[$path]:-}" ] ||
    problems+=("the RPM has $path, which the .deb has not (and $DIFFERENCES does not list)")
done
for path in "${!only_rpm[@]}"; do [ -n "${rpm_mode[$path]:-}" ] || problems+=("$DIFFERENCES: only-rpm $path, which the RPM has not"); done
for path in "${!only_deb[@]}"; do [ -n "${deb_mode[$path]:-}" ] || problems+=("$DIFFERENCES: only-deb $path, which the .deb has not"); done
for path in "${!moved[@]}"; do
  [ -n "${deb_mode[$path]:-}" ] || problems+=("$DIFFERENCES: moved $path, which the .deb has not")
  [ -z "${rpm_mode[$path]:-}" ] || problems+=("$DIFFERENCES: moved $path, which the RPM still has")
done
for path in "${!edited[@]}"; do [ -n "${rpm_mode[$path]:-}" ] || problems+=("$DIFFERENCES: edited $path, which the RPM has not"); done
if [ "${#problems[@]}" -gt 0 ]; then
  printf 'test-rpm: FAIL: %s\n' "${problems[@]}" >&2
  exit 1
fi
ok "$(wc -l <"$tmp/rpm.list") files: the same paths, modes and bytes as the .deb's $(wc -l <"$tmp/deb.list"), but for the $(grep -cv '^\(#\|$\)' "$DIFFERENCES") differences $DIFFERENCES lists"

# The PHP helpers and the rules are the source tree's, all of them, in both packages.
for pkg in deb rpm; do
  have=$(awk '{print $2}' "$tmp/$pkg.list" | sed -n 's|^/usr/share/selfheal/php/Selfheal/||p' | sort | tr '\n' ' ')
  want=$(cd php/Selfheal && ls -- *.php | sort | tr '\n' ' ')
  [ "$have" = "$want" ] || fail "the $pkg has PHP helpers '$have', php/Selfheal/ has '$want'"
done
for f in php/Selfheal/*.php; do
  cmp -s "$f" "$root/usr/share/selfheal/$f" || fail "the RPM's $f is not the source tree's"
done
for f in selfheal-rules.yml selfheal-rules.test.yml; do
  cmp -s "packaging/prometheus/$f" "$root/usr/share/selfheal/prometheus/$f" ||
    fail "the RPM's $f is not the source tree's"
done
ok "both packages have every php/Selfheal/*.php ($(cd php/Selfheal && echo -- *.php | sed 's/^-- //')) and the rules with their tests, as in the source tree"

# --- the scratch root: verify, configuration, units --------------------------------------------
out=$(rpm --root "$root" -V --nodeps selfheal 2>&1) || fail "rpm -V in the scratch root: $out"
[ -z "$out" ] || fail "rpm -V in the scratch root: $out"
[ "$(rpm --root "$root" -qc selfheal | sort | tr '\n' ' ')" = "/etc/cron.d/selfheal /etc/selfheal/selfheal.toml " ] ||
  fail "configuration files: $(rpm --root "$root" -qc selfheal | tr '\n' ' ')"
[ "$(rpm -qp --qf '[%{FILEFLAGS:fflags} %{FILENAMES}\n]' "$rpm" | awk '$2 ~ /^\/etc\// && $1 !~ /n/')" = "" ] ||
  fail "a file under /etc is not %config(noreplace): $(rpm -qp --qf '[%{FILEFLAGS:fflags} %{FILENAMES}\n]' "$rpm" | grep ' /etc/')"
[ "$(stat -c '%a %U' "$root/usr/bin/selfheal")" = "755 root" ] || fail "/usr/bin/selfheal: $(stat -c '%a %U' "$root/usr/bin/selfheal")"
zgrep -q '^\.SH "EXIT STATUS"' "$root/usr/share/man/man1/selfheal.1.gz" || fail "the RPM's man page has no EXIT STATUS section"
echo '# edited by the administrator' >>"$root/etc/selfheal/selfheal.toml"
rpm --root "$root" --noscripts --nodeps -U --replacepkgs "$rpm"
grep -q '^# edited by the administrator$' "$root/etc/selfheal/selfheal.toml" ||
  fail "reinstalling replaced the edited /etc/selfheal/selfheal.toml"
ok "rpm -V clean; /etc/selfheal/selfheal.toml and /etc/cron.d/selfheal are %config(noreplace), an edit survives a reinstall"

# The units: offline verification (any message is a finding; verify wants ExecStart's binary
# to exist, so a copy of the service names the scratch root's), and the service runs the cron
# line's user and command.
units=("$root/usr/lib/systemd/system/selfheal.service" "$root/usr/lib/systemd/system/selfheal.timer")
mkdir "$tmp/units"
sed "s|^ExecStart=/usr/bin/selfheal |ExecStart=$root/usr/bin/selfheal |" "${units[0]}" >"$tmp/units/selfheal.service"
[ "$(diff "${units[0]}" "$tmp/units/selfheal.service" | grep -c '^[<>]')" = 2 ] || fail "no ExecStart=/usr/bin/selfheal in the RPM's selfheal.service"
cp "${units[1]}" "$tmp/units/selfheal.timer"
out=$(systemd-analyze verify --man=no "$tmp/units/selfheal.service" "$tmp/units/selfheal.timer" 2>&1) || fail "systemd-analyze verify: $out"
[ -z "$out" ] || fail "systemd-analyze verify: $out"
cron_line=$(grep -v '^[[:space:]]*#' "$root/etc/cron.d/selfheal" | grep /usr/bin/selfheal)
read -r _ _ _ _ _ cron_user cron_cmd <<<"$cron_line"
cron_cmd=${cron_cmd#"[ -x /usr/bin/selfheal ] && "}
unit_user=$(sed -n 's/^User=//p' "${units[0]}")
unit_cmd=$(sed -n 's/^ExecStart=//p' "${units[0]}")
[ "$cron_user" = "$RPM_USER" ] || fail "the RPM's cron line runs as $cron_user, want $RPM_USER"
[ "$unit_user $unit_cmd" = "$cron_user $cron_cmd" ] ||
  fail "selfheal.service runs '$unit_cmd' as $unit_user; the cron line '$cron_cmd' as $cron_user"
ok "systemd-analyze verify: units clean; selfheal.service runs '$unit_cmd' as $unit_user, as the cron line does"

# --- the scriptlets ----------------------------------------------------------------------------
rpm -qp --scripts "$rpm" >"$tmp/scripts"
mkdir -p "$tmp/scriptlets"
awk -v dir="$tmp/scriptlets" '
  /^(preinstall|postinstall|preuninstall|postuninstall) scriptlet \(using \/bin\/sh\):$/ {
    file = dir "/" $1; next }
  /scriptlet \(using/ { print "unexpected scriptlet: " $0 > "/dev/stderr"; exit 1 }
  file { print > file }' "$tmp/scripts"
for s in preinstall postinstall preuninstall postuninstall; do
  [ -s "$tmp/scriptlets/$s" ] || fail "no $s scriptlet"
  sh -n "$tmp/scriptlets/$s" || fail "sh -n: $s"
  bash -n "$tmp/scriptlets/$s" || fail "bash -n: $s"
  grep -q 'systemctl.* enable' "$tmp/scriptlets/$s" && fail "the $s scriptlet enables a unit"
done
ok "scriptlets: preinstall, postinstall, preuninstall, postuninstall pass sh -n and bash -n; none enables a unit"

host_users=$(cat /etc/passwd /etc/group /etc/shadow /etc/gshadow | md5sum)
# A scratch host: /etc (a copy of this host's, with the passwd/group/shadow/gshadow below),
# /var/lib and /var/log, mounted over the real ones in a private mount namespace for each run.
host=$tmp/host
new_host() { # PASSWD-LINES GROUP-LINES
  rm -rf --one-file-system "$host"
  mkdir -p "$host/var-lib" "$host/var-log"
  cp -a /etc "$host/etc"
  printf '%s\n' "$1" >"$host/etc/passwd"
  printf '%s\n' "$2" >"$host/etc/group"
  awk -F: '{ print $1 ":*:20000:0:99999:7:::" }' "$host/etc/passwd" >"$host/etc/shadow"
  awk -F: '{ print $1 ":*::" }' "$host/etc/group" >"$host/etc/gshadow"
  chmod 640 "$host/etc/shadow" "$host/etc/gshadow"
  rm -f "$host/etc/passwd-" "$host/etc/group-" "$host/etc/shadow-" "$host/etc/gshadow-"
  rm -rf "$host/etc/systemd/system/timers.target.wants/selfheal.timer"
  mkdir -p "$host/etc/cron.d"
  cp "$root/etc/cron.d/selfheal" "$host/etc/cron.d/selfheal"
}
in_host() { # COMMAND...: run in the scratch host
  unshare --mount --propagation private -- sh -c '
    h=$1; shift
    mount --bind "$h/etc" /etc && mount --bind "$h/var-lib" /var/lib && mount --bind "$h/var-log" /var/log || exit 97
    if [ -d /run/systemd ]; then mount -t tmpfs scratch /run/systemd || exit 97; fi
    exec "$@"' in-host "$host" "$@"
}
scriptlet() { # NAME ARG: run a scriptlet as rpm does (sh, the count of installed instances)
  in_host sh "$tmp/scriptlets/$1" "$2"
}
users="root:x:0:0:root:/root:/bin/bash
bin:x:1:1:bin:/bin:/sbin/nologin
daemon:x:2:2:daemon:/sbin:/sbin/nologin
nobody:x:99:99:Nobody:/:/sbin/nologin
apache:x:48:48:Apache:/usr/share/httpd:/sbin/nologin"
groups="root:x:0:
bin:x:1:
daemon:x:2:
nobody:x:99:
apache:x:48:"
snapshot() { cat "$host/etc/passwd" "$host/etc/group" "$host/etc/shadow" "$host/etc/gshadow" | md5sum; }

# Install on a host with httpd's apache user: the user selfheal made, the state directory
# the cron user's.
new_host "$users" "$groups"
scriptlet preinstall 1
entry=$(in_host getent passwd selfheal) || fail "preinstall made no selfheal user"
IFS=: read -r _ _ uid gid _ home shell <<<"$entry"
[ "$uid" -lt 1000 ] && [ "$home" = /var/lib/selfheal ] && [ "$shell" = /sbin/nologin ] ||
  fail "the selfheal user: $entry (want a system uid, home /var/lib/selfheal, /sbin/nologin)"
[ "$(in_host getent group selfheal | cut -d: -f3)" = "$gid" ] || fail "selfheal's group: $(in_host getent group selfheal)"
scriptlet postinstall 1
[ "$(stat -c '%u:%g %a' "$host/var-lib/selfheal" 2>&1)" = "48:48 750" ] ||
  fail "after install, /var/lib/selfheal is $(stat -c '%u:%g %a' "$host/var-lib/selfheal" 2>&1), want apache (48:48) 750"
ok "install: preinstall made the system user selfheal ($entry); postinstall gave /var/lib/selfheal to apache, 750"

# Runs wrote the journal. An upgrade: the new package's pre and post ($1 = 2), then the old
# one's preun and postun ($1 = 1); then an erase ($1 = 0). Nothing of the state goes.
printf '{"id":2}\n' >"$host/var-lib/selfheal/journal.jsonl"
chown 48:48 "$host/var-lib/selfheal/journal.jsonl"
mkdir "$host/var-lib/selfheal/shop" && printf 'x' >"$host/var-lib/selfheal/shop/last-run.json"
chown -R 48:48 "$host/var-lib/selfheal/shop"
state() { (cd "$host/var-lib/selfheal" && find . -printf '%p %U %G %m %s\n' | sort && cat journal.jsonl) | md5sum; }
before_users=$(snapshot)
before_state=$(state)
scriptlet preinstall 2
[ "$(snapshot)" = "$before_users" ] || fail "preinstall changed passwd/group on an upgrade"
scriptlet postinstall 2
scriptlet preuninstall 1
scriptlet postuninstall 1
[ "$(state)" = "$before_state" ] || fail "an upgrade changed the state directory"
scriptlet preuninstall 0
scriptlet postuninstall 0
[ "$(state)" = "$before_state" ] || fail "an erase changed or removed the state directory"
[ "$(snapshot)" = "$before_users" ] || fail "an erase changed passwd/group"
ok "upgrade (pre/post 2, preun/postun 1) and erase (preun/postun 0): the user, /var/lib/selfheal and its journal untouched"

# A selfheal user the host already has (another uid, another group) is left alone.
new_host "$users
selfheal:x:4242:48:made by hand:/srv/selfheal:/bin/sh" "$groups"
before_users=$(snapshot)
scriptlet preinstall 1
[ "$(snapshot)" = "$before_users" ] || fail "preinstall changed an existing selfheal user or group"
ok "an existing selfheal user (uid 4242, group apache): preinstall changes nothing"

# No apache user (no httpd): the state directory goes to selfheal, with a word why.
new_host "$(printf '%s\n' "$users" | grep -v '^apache:')" "$(printf '%s\n' "$groups" | grep -v '^apache:')"
scriptlet preinstall 1
msg=$(scriptlet postinstall 1 2>&1) || fail "postinstall failed without an apache user: $msg"
[[ "$msg" == *"the user 'apache' named in /etc/cron.d/selfheal does not exist"* ]] || fail "postinstall said: $msg"
[ "$(stat -c %u "$host/var-lib/selfheal")" = "$(in_host id -u selfheal)" ] || fail "/var/lib/selfheal not given to selfheal"
ok "no apache user: postinstall gives /var/lib/selfheal to selfheal and says why"

# The operator's guide's switch to the timer: the cron line commented out, selfheal.service's User=
# (apache, as the cron line's) runs selfheal. An upgrade leaves the directory to it; with no
# unit to read, it keeps its owner; a drop-in naming another user is followed and said.
new_host "$users" "$groups"
scriptlet preinstall 1
scriptlet postinstall 1
sed -i 's|^\*/10 |# */10 |' "$host/etc/cron.d/selfheal"
scriptlet postinstall 2
[ "$(stat -c %u "$host/var-lib/selfheal")" = 48 ] ||
  fail "cron line commented out, no unit: the directory went to $(stat -c %U "$host/var-lib/selfheal")"
mkdir -p "$host/etc/systemd/system"
cp "$root/usr/lib/systemd/system/selfheal.service" "$host/etc/systemd/system/selfheal.service"
scriptlet postinstall 2
[ "$(stat -c %u "$host/var-lib/selfheal")" = 48 ] ||
  fail "the timer's unit (User=apache): the directory went to $(stat -c %U "$host/var-lib/selfheal")"
mkdir -p "$host/etc/systemd/system/selfheal.service.d"
printf '[Service]\nUser=selfheal\n' >"$host/etc/systemd/system/selfheal.service.d/user.conf"
msg=$(scriptlet postinstall 2 2>&1)
[ "$(stat -c %u "$host/var-lib/selfheal")" = "$(in_host id -u selfheal)" ] || fail "the drop-in's User=selfheal was not followed"
[[ "$msg" == *"now belongs to selfheal, named in the User= of selfheal.service"* ]] || fail "postinstall said: $msg"
ok "timer instead of cron: postinstall reads selfheal.service's User= (apache), keeps the owner with no unit to read, follows a drop-in and says so"

# The cron user changed to selfheal: the next postinstall (yum reinstall) hands the directory
# and its files over, and a link someone planted in it is not followed.
new_host "$users" "$groups"
scriptlet preinstall 1
scriptlet postinstall 1
printf 'secret\n' >"$host/etc/victim" && chmod 600 "$host/etc/victim"
printf '{}\n' >"$host/var-lib/selfheal/journal.jsonl" && chown 48:48 "$host/var-lib/selfheal/journal.jsonl"
ln -s /etc/victim "$host/var-lib/selfheal/planted"
sed -i "s/^\(\*\/10 \* \* \* \*\) $RPM_USER /\1 selfheal /" "$host/etc/cron.d/selfheal"
scriptlet postinstall 2
sh_uid=$(in_host id -u selfheal)
[ "$(stat -c %u "$host/var-lib/selfheal") $(stat -c %u "$host/var-lib/selfheal/journal.jsonl")" = "$sh_uid $sh_uid" ] ||
  fail "after the cron user changed: $(stat -c %u "$host/var-lib/selfheal") $(stat -c %u "$host/var-lib/selfheal/journal.jsonl"), want $sh_uid"
[ "$(stat -c %u "$host/etc/victim")" = 0 ] || fail "postinstall followed a planted link to $(stat -c %U "$host/etc/victim")"
ok "cron user changed to selfheal: postinstall hands over the directory and journal, a planted link is not followed"

# The real host was not touched.
[ "$(cat /etc/passwd /etc/group /etc/shadow /etc/gshadow | md5sum)" = "$host_users" ] ||
  fail "this host's passwd, group, shadow or gshadow changed while the scriptlets ran"
ok "this host's passwd, group, shadow and gshadow are as they were: the scriptlets ran on scratch files only"
