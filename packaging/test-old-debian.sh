#!/usr/bin/env bash
# Installs the .deb in a chroot of an older Debian release and runs it there: dpkg -i,
# --version, the cron line with the shipped configuration (a quiet no-op), `doctor` and a
# real `check` against a SQLite database as www-data that marks a dead row (two runs: the
# second confirms what the first found), then dpkg -P.
#
# The release is the oldest one this host's Debian mirror (taken from apt's configuration)
# still serves, from $SELFHEAL_OLD_SUITES (default: "stretch buster bullseye"); older ones
# live only on the archive mirror. The chroot comes from `debootstrap --variant=minbase`,
# cached as a tarball in $SELFHEAL_TEST_CACHE (default /var/cache/selfheal-test) so that a
# second run only unpacks it.
#
# Usage: packaging/test-old-debian.sh PACKAGE.deb      (root; needs the mirror)
set -euo pipefail
cd "$(dirname "$0")/.."

deb=$(realpath "${1:?usage: packaging/test-old-debian.sh PACKAGE.deb}")
SUITES=${SELFHEAL_OLD_SUITES:-stretch buster bullseye}
CACHE=${SELFHEAL_TEST_CACHE:-/var/cache/selfheal-test}

say() { echo "test-old-debian: $*"; }
fail() { echo "test-old-debian: FAIL: $*" >&2; exit 1; }
ok() { echo "test-old-debian: ok: $*"; }
# Cron's next run comes a period later: a run counts toward confirm only stale_after / 2
# after the one before. Ten minutes pass for the counts, as a clock would move them (the
# file rewritten in place: its owner and mode stay).
age_counts() {
  python3 - "$1" <<'PY'
import json, sys
path = sys.argv[1]
with open(path) as f:
    counts = json.load(f)
for entry in counts.get("entries", []):
    entry["seen"] -= 600
with open(path, "w") as f:
    json.dump(counts, f)
PY
}

[ "$(id -u)" -eq 0 ] || fail "needs root (debootstrap, chroot)"
packaging/tools.sh debootstrap debian-archive-keyring curl sqlite3

debian_mirror() {
  apt-get indextargets --format '$(REPO_URI)|$(LABEL)' 2>/dev/null |
    awk -F'|' '$2 == "Debian" { print $1; exit }'
}
mirror=$(debian_mirror)
[ -n "$mirror" ] || { apt-get update -qq; mirror=$(debian_mirror); }
[ -n "$mirror" ] || fail "no Debian mirror in apt's configuration (apt-get update first?)"
suite=
for s in $SUITES; do
  if curl -fsS -o /dev/null -m 20 "${mirror%/}/dists/$s/Release" 2>/dev/null; then suite=$s; break; fi
  say "$s: not on the mirror"
done
[ -n "$suite" ] || fail "none of $SUITES is on the mirror"

mkdir -p "$CACHE"
tarball=$CACHE/$suite-minbase.tar.gz
if [ ! -s "$tarball" ]; then
  say "debootstrap $suite (minbase) — cached afterwards in $tarball"
  start=$SECONDS
  build=$(mktemp -d "$CACHE/build.XXXXXX")
  debootstrap --variant=minbase --include=adduser "$suite" "$build/root" "$mirror" >"$build/log" 2>&1 ||
    { tail -n 20 "$build/log" >&2; rm -rf "$build"; fail "debootstrap $suite"; }
  tar -C "$build/root" -czf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
  rm -rf "$build"
  say "debootstrap took $((SECONDS - start)) s"
fi

root=$(mktemp -d /tmp/selfheal-chroot.XXXXXX)
cleanup() {
  for m in dev proc; do mountpoint -q "$root/$m" && umount -l "$root/$m"; done
  rm -rf --one-file-system "$root"
}
trap cleanup EXIT
tar -C "$root" -xzf "$tarball"
mount -t proc proc "$root/proc"
mount --bind /dev "$root/dev"
mkdir -p "$root/run/lock" && chmod 1777 "$root/run/lock"
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@"; }

say "$(in_root sh -c '. /etc/os-release && echo "$PRETTY_NAME"'), $(in_root ldd --version | head -n1)"
cp "$deb" "$root/tmp/selfheal.deb"
in_root dpkg -i /tmp/selfheal.deb
ok "dpkg -i in $suite"
version=$(in_root selfheal --version)
ok "$version runs on $suite's glibc"

cron_cmd=$(grep -v '^[[:space:]]*#' "$root/etc/cron.d/selfheal" | grep /usr/bin/selfheal | cut -d' ' -f7-)
out=$(in_root runuser -u www-data -- sh -c "cd / && $cron_cmd" 2>&1) ||
  fail "the cron line with the shipped config failed: $out"
[ -z "$out" ] || fail "the cron line with the shipped config printed: $out"
ok "the cron line as www-data with the shipped config: exit 0, no output"

# A SQLite application database as a PHP app on that host would have it, owned by www-data;
# its timestamps are UTC text, as SQLite's datetime('now') writes them.
install -d -o 33 -g 33 "$root/var/lib/app" "$root/var/lib/app/runtime"
sqlite3 "$root/var/lib/app/app.db" <<'SQL'
CREATE TABLE sync_log (id INTEGER PRIMARY KEY, status TEXT NOT NULL, start_time TEXT,
  end_time TEXT, error_msg TEXT NOT NULL DEFAULT '');
CREATE INDEX sync_log_status ON sync_log (status);
INSERT INTO sync_log (id, status, start_time) VALUES
  (1, 'running', datetime('now', '-130 minutes')),
  (2, 'running', datetime('now', '-50 minutes'));
SQL
chown 33:33 "$root/var/lib/app/app.db"
touch "$root/var/lib/app/runtime/progress-1.json"
touch -d '47 minutes ago' "$root/var/lib/app/runtime/progress-2.json"
chown 33:33 "$root"/var/lib/app/runtime/*
# One host's jobs and files: the watch is pinned to it (doctor warns otherwise).
cat >"$root/var/lib/app/selfheal.toml" <<TOML
[database]
url = "sqlite:///var/lib/app/app.db"

[[watch]]
name = "full-sync"
host = "$(hostname)"
table = "sync_log"
started_column = "start_time"
heartbeat_file = "/var/lib/app/runtime/progress-{id}.json"
stale_after = "5m"
max_age = "4h"
ended_column = "end_time"
message_column = "error_msg"
TOML
out=$(in_root runuser -u www-data -- sh -c 'cd / && selfheal doctor --config /var/lib/app/selfheal.toml' 2>&1) ||
  fail "doctor in the chroot: exit $?: $out"
printf '%s\n' "$out" | sed 's/^/  doctor| /'
ok "doctor as www-data in $suite: exit 0"
# The first run holds the silent row to confirm it (confirm = 2): nothing printed or changed.
out=$(in_root runuser -u www-data -- sh -c 'cd / && selfheal check --config /var/lib/app/selfheal.toml' 2>&1) ||
  fail "first check in the chroot: exit $?: $out"
[ -z "$out" ] || fail "the first check in $suite printed: $out"
rows=$(sqlite3 "$root/var/lib/app/app.db" "SELECT id, status FROM sync_log ORDER BY id" | tr '|' ' ' | tr '\n' ';')
[ "$rows" = "1 running;2 running;" ] || fail "rows after the first check in $suite: $rows"
[ "$(stat -c %u "$root/var/lib/selfheal/confirmations.json")" = 33 ] || fail "confirmation counts not owned by www-data"
ok "the first check as www-data in $suite holds the silent row to confirm it"
# Cron's next run confirms and marks it.
age_counts "$root/var/lib/selfheal/confirmations.json"
out=$(in_root runuser -u www-data -- sh -c 'cd / && selfheal check --config /var/lib/app/selfheal.toml' 2>&1) ||
  fail "check in the chroot: exit $?: $out"
printf '%s\n' "$out" | sed 's/^/  check| /'
rows=$(sqlite3 "$root/var/lib/app/app.db" "SELECT id, status, end_time IS NOT NULL,
  error_msg LIKE 'self-heal: dead:%' FROM sync_log ORDER BY id" | tr '|' ' ' | tr '\n' ';')
[ "$rows" = "1 running 0 0;2 error 1 1;" ] || fail "rows after the check in $suite: $rows"
[ "$(stat -c %u "$root/var/lib/selfheal/journal.jsonl")" = 33 ] || fail "journal not owned by www-data"
ok "check as www-data in $suite marked the dead row (bundled SQLite), journaled in /var/lib/selfheal"

in_root dpkg -P selfheal >/dev/null
[ ! -e "$root/var/lib/selfheal" ] && [ ! -e "$root/etc/cron.d/selfheal" ] && [ ! -e "$root/etc/selfheal" ] || fail "dpkg -P left files in $suite"
ok "dpkg -P in $suite"
