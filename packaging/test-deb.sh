#!/usr/bin/env bash
# Installs the .deb on this host and uses it as an operator would: dpkg -i, the binary, the
# man page, the completions, the PHP helper, the alerting rules, the systemd units (verified,
# not enabled, the cron line's user and command), the shipped (watch-less) configuration run
# by the cron line itself, `doctor` and a real `check` against a throw-away MariaDB database
# as the cron user, dpkg-reconfigure following a change of that user, dpkg -r (conffiles and
# state stay, the cron line goes quiet), dpkg -P (all gone, a timer someone enabled too), and
# lintian.
#
# Usage: packaging/test-deb.sh PACKAGE.deb
# Needs root and a MariaDB server on /run/mysqld/mysqld.sock (scripts/test starts one). It
# changes this host while it runs: the selfheal package is installed, then purged (an
# installed selfheal is purged first, and the selfheal system user removed), a MariaDB
# database and user are created and dropped, and a private MariaDB server with TLS runs for a
# moment on a free port of 127.0.0.1. Two runs on one machine wait for each other.
set -euo pipefail
cd "$(dirname "$0")/.."

deb=${1:?usage: packaging/test-deb.sh PACKAGE.deb}
deb=$(realpath "$deb")
CRON_USER=www-data
SOCKET=/run/mysqld/mysqld.sock

say() { echo "test-deb: $*"; }
fail() { echo "test-deb: FAIL: $*" >&2; exit 1; }
ok() { echo "test-deb: ok: $*"; }
installed() { dpkg-query -W -f='${Status}' selfheal 2>/dev/null; }
as_cron_user() { runuser -u "$CRON_USER" -- "$@"; }
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

[ "$(id -u)" -eq 0 ] || fail "needs root (dpkg -i)"
packaging/tools.sh lintian man-db adduser mariadb-client mariadb-server openssl systemd

mariadb -e 'SELECT 1' >/dev/null 2>&1 || fail "no MariaDB answers on $SOCKET as root (run scripts/test first)"

exec 9>/run/lock/selfheal-test-deb.lock
flock -w 1800 9 || fail "another packaging test held /run/lock/selfheal-test-deb.lock for 30 min"

if [ -n "$(installed)" ] && [ "$(installed)" != "unknown ok not-installed" ]; then
  say "purging the selfheal package already on this host ($(installed))"
  dpkg -P selfheal >/dev/null
fi

# The package keeps its system user on purge; remove one a previous run left, so that the
# postinst's creation of it is tested here.
if getent passwd selfheal >/dev/null; then deluser --system --quiet selfheal 2>/dev/null; fi
getent passwd selfheal >/dev/null && fail "could not remove the selfheal user a previous run left"

tmp=$(mktemp -d)
chmod 755 "$tmp"
db="selfheal_deb_$$_$RANDOM"
cleanup() {
  mariadb -e "DROP DATABASE IF EXISTS \`$db\`; DROP USER IF EXISTS '$db'@'localhost'" || true
  case "$(installed)" in "" | "unknown ok not-installed") ;; *) dpkg -P selfheal >/dev/null || true ;; esac
  rm -rf "$tmp"
}
trap cleanup EXIT

# --- install ---------------------------------------------------------------------------------
say "dpkg -i $(basename "$deb")"
dpkg -i "$deb"
[ "$(installed)" = "install ok installed" ] || fail "dpkg status after dpkg -i: $(installed)"
dpkg -i "$deb" >/dev/null || fail "installing the same package again (postinst is not idempotent)"
ok "installed, twice"
[ -z "$(dpkg --verify selfheal)" ] || fail "dpkg --verify: $(dpkg --verify selfheal)"
ok "dpkg --verify (md5sums) clean"

version=$(selfheal --version)
want="selfheal $(dpkg-deb -f "$deb" Version | sed 's/-[^-]*$//')"
[ "$version" = "$want" ] || fail "selfheal --version printed '$version', want '$want'"
ok "$version"

for f in /etc/selfheal/selfheal.toml /etc/cron.d/selfheal; do
  dpkg-query -W -f='${Conffiles}\n' selfheal | grep -q "^ $f " || fail "$f is not a conffile"
done
ok "conffiles: /etc/selfheal/selfheal.toml /etc/cron.d/selfheal"

[ "$(man -w selfheal)" = /usr/share/man/man1/selfheal.1.gz ] || fail "man -w selfheal: $(man -w selfheal 2>&1)"
man selfheal 2>/dev/null | grep -q 'EXIT STATUS' || fail "man selfheal does not render an EXIT STATUS section"
ok "man -w selfheal: $(man -w selfheal)"

bash -c '. /usr/share/bash-completion/completions/selfheal && complete -p selfheal' >/dev/null ||
  fail "the bash completion does not register for selfheal"
words=$(bash -c '. /usr/share/bash-completion/completions/selfheal
  COMP_WORDS=(selfheal ""); COMP_CWORD=1; COMP_LINE="selfheal "; COMP_POINT=${#COMP_LINE}
  _selfheal selfheal "" selfheal; echo "${COMPREPLY[*]}"')
for w in check doctor demo; do
  [[ " $words " == *" $w "* ]] || fail "bash completion of 'selfheal ' lacks $w: $words"
done
grep -q '^#compdef selfheal' /usr/share/zsh/vendor-completions/_selfheal || fail "no zsh completion"
grep -q 'complete -c selfheal' /usr/share/fish/vendor_completions.d/selfheal.fish || fail "no fish completion"
ok "bash completes 'selfheal ' to the subcommands; zsh and fish completions installed"

# The PHP helper: installed where the job author's guide says, loadable without Composer, and (where php
# is installed) usable: the owner value and a lock that writes the holder line.
for f in Job.php LockNotObtained.php Lease.php LeaseLost.php; do
  [ -f "/usr/share/selfheal/php/Selfheal/$f" ] || fail "the PHP helper's $f is not installed"
done
if command -v php >/dev/null; then
  out=$(cd "$tmp" && php -r 'require "/usr/share/selfheal/php/Selfheal/Job.php";
    $j = Selfheal\Job::start(["lock" => getcwd() . "/php.lock"]);
    echo Selfheal\Job::owner(), "|", file_get_contents(getcwd() . "/php.lock");') ||
    fail "the PHP helper does not load: $out"
  [[ "$out" == "$(hostname):"*"|$(hostname):"*" "*Z ]] || fail "the PHP helper wrote: $out"
  ok "PHP helper: /usr/share/selfheal/php/Selfheal/Job.php loads and locks ($out)"
else
  ok "PHP helper installed in /usr/share/selfheal/php/Selfheal/ (no php here to load it)"
fi

# The alerting rules: the source tree's (tests/prometheus.rs tests those with promtool).
cmp -s packaging/prometheus/selfheal-rules.yml /usr/share/selfheal/prometheus/selfheal-rules.yml ||
  fail "/usr/share/selfheal/prometheus/selfheal-rules.yml is not packaging/prometheus/selfheal-rules.yml"
ok "alerting rules in /usr/share/selfheal/prometheus/selfheal-rules.yml"
# Their test cases, beside them, run where they were installed (the file names the rules
# relative to itself).
cmp -s packaging/prometheus/selfheal-rules.test.yml /usr/share/selfheal/prometheus/selfheal-rules.test.yml ||
  fail "/usr/share/selfheal/prometheus/selfheal-rules.test.yml is not packaging/prometheus/selfheal-rules.test.yml"
if command -v promtool >/dev/null; then
  (cd /usr/share/selfheal/prometheus && promtool test rules selfheal-rules.test.yml >/dev/null) ||
    fail "promtool test rules fails on the installed rules"
  ok "promtool test rules passes on the installed rules and their tests"
fi

# The systemd units: installed, clean for systemd-analyze verify (which wants ExecStart's
# binary and the man page installed; it exits 0 on unknown keys, so any message fails),
# not enabled, and the service runs the cron line's user and command.
units=(/lib/systemd/system/selfheal.service /lib/systemd/system/selfheal.timer)
out=$(systemd-analyze verify "${units[@]}" 2>&1) || fail "systemd-analyze verify: $out"
[ -z "$out" ] || fail "systemd-analyze verify: $out"
for u in selfheal.service selfheal.timer; do
  links=$(find /etc/systemd/system -name "$u" 2>/dev/null)
  [ -z "$links" ] || fail "$u is enabled after dpkg -i: $links"
done
[ "$(systemctl is-enabled selfheal.timer 2>/dev/null || true)" = disabled ] ||
  fail "systemctl is-enabled selfheal.timer: $(systemctl is-enabled selfheal.timer 2>&1 || true)"
read -r _ _ _ _ _ cron_user cron_command <<<"$(grep -v '^[[:space:]]*#' /etc/cron.d/selfheal | grep /usr/bin/selfheal)"
cron_command=${cron_command#"[ -x /usr/bin/selfheal ] && "}
unit_user=$(sed -n 's/^User=//p' "${units[0]}")
unit_command=$(sed -n 's/^ExecStart=//p' "${units[0]}")
[ "$unit_user|$unit_command" = "$cron_user|$cron_command" ] ||
  fail "selfheal.service runs '$unit_command' as $unit_user, the cron line '$cron_command' as $cron_user"
ok "systemd-analyze verify: selfheal.service and selfheal.timer clean; disabled; the service runs '$unit_command' as $unit_user, as the cron line does"

[ ! -e /var/lib/selfheal/last-run.json ] || fail "dpkg -i wrote a last-run.json (no run has happened)"
getent passwd selfheal >/dev/null || fail "postinst did not create the system user selfheal"
[ "$(stat -c '%U:%G %a' /var/lib/selfheal)" = "$CRON_USER:$CRON_USER 750" ] ||
  fail "/var/lib/selfheal is $(stat -c '%U:%G %a' /var/lib/selfheal), want $CRON_USER:$CRON_USER 750"
ok "system user selfheal; /var/lib/selfheal owned by the cron user $CRON_USER, 750"

# --- the cron line, as shipped: the watch-less configuration is a quiet no-op ----------------
cron_line=$(grep -v '^[[:space:]]*#' /etc/cron.d/selfheal | grep /usr/bin/selfheal)
read -r _ _ _ _ _ user cron_cmd <<<"$cron_line"
[ "$user" = "$CRON_USER" ] || fail "the cron line runs as '$user', want $CRON_USER"
case "$cron_cmd" in "[ -x /usr/bin/selfheal ] && "*) ;; *) fail "cron command not guarded: $cron_cmd" ;; esac
grep -q '^MAILTO=root$' /etc/cron.d/selfheal || fail "no MAILTO=root in the cron file"
set +e
out=$(cd / && runuser -u "$user" -- sh -c "$cron_cmd" 2>&1)
rc=$?
set -e
[ "$rc" -eq 0 ] && [ -z "$out" ] || fail "the cron line with the shipped config: exit $rc, output: $out"
[ ! -e /var/lib/selfheal/last-run.json ] || fail "the watch-less cron run wrote a last-run.json"
ok "the cron line as $user with the shipped config: exit 0, no output (no mail), no last-run.json"

# --- doctor and a real check against a throw-away MariaDB database, as the cron user ---------
pass=$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')
mariadb <<SQL
CREATE DATABASE \`$db\`;
CREATE USER '$db'@'localhost' IDENTIFIED BY '$pass';
GRANT SELECT, UPDATE ON \`$db\`.* TO '$db'@'localhost';
USE \`$db\`;
CREATE TABLE sync_log (
  id INT AUTO_INCREMENT PRIMARY KEY,
  status VARCHAR(16) NOT NULL,
  start_time DATETIME NULL,
  end_time DATETIME NULL,
  error_msg VARCHAR(255) NOT NULL DEFAULT '',
  KEY idx_status (status)
) ENGINE=InnoDB;
INSERT INTO sync_log (id, status, start_time) VALUES
  (1, 'running', NOW() - INTERVAL 130 MINUTE),
  (2, 'running', NOW() - INTERVAL 50 MINUTE),
  (3, 'done', NOW() - INTERVAL 3 HOUR);
SQL
# The password file as an operator would leave it: readable by root and the cron user only.
printf '%s\n' "$pass" >"$tmp/db-password"
chown "root:$CRON_USER" "$tmp/db-password"
chmod 640 "$tmp/db-password"
# The heartbeat files as the PHP jobs write them: row 1 beats, row 2 stopped 47 minutes ago.
install -d -o "$CRON_USER" -g "$CRON_USER" -m 755 "$tmp/runtime"
runuser -u "$CRON_USER" -- touch "$tmp/runtime/progress-1.json"
runuser -u "$CRON_USER" -- touch -d '47 minutes ago' "$tmp/runtime/progress-2.json"
cat >"$tmp/selfheal.toml" <<TOML
[database]
url = "mysql://$db@localhost/$db?socket=$SOCKET"
password_file = "$tmp/db-password"

[[watch]]
name = "full-sync"
host = "$(hostname)"
table = "sync_log"
started_column = "start_time"
heartbeat_file = "$tmp/runtime/progress-{id}.json"
stale_after = "5m"
max_age = "4h"
ended_column = "end_time"
message_column = "error_msg"
TOML
chmod 644 "$tmp/selfheal.toml"

set +e
out=$(cd / && as_cron_user selfheal doctor --config "$tmp/selfheal.toml" 2>&1)
rc=$?
set -e
printf '%s\n' "$out" | sed 's/^/  doctor| /'
[ "$rc" -eq 0 ] || fail "selfheal doctor as $CRON_USER exited $rc"
ok "selfheal doctor as $CRON_USER against the test database: exit 0"

# The first run finds row 2 silent and holds it: a death drawn from a heartbeat alone acts
# only when the next run finds the same (confirm = 2). Nothing printed, nothing changed.
set +e
out=$(cd / && as_cron_user selfheal check --config "$tmp/selfheal.toml" 2>&1)
rc=$?
set -e
[ "$rc" -eq 0 ] && [ -z "$out" ] || fail "first check: exit $rc, output: $out"
rows=$(mariadb -N -B -e "SELECT id, status FROM \`$db\`.sync_log ORDER BY id" | tr '\t' ' ' | tr '\n' ';')
[ "$rows" = "1 running;2 running;3 done;" ] || fail "rows after the first check: $rows"
counts=/var/lib/selfheal/confirmations.json
[ "$(stat -c '%U %a' "$counts")" = "$CRON_USER 640" ] || fail "confirmation counts: $(stat -c '%U %a' "$counts")"
grep -q '"count":1' "$counts" || fail "no count for row 2: $(cat "$counts")"
[ "$(stat -c '%U %a' /var/lib/selfheal/last-run.json)" = "$CRON_USER 640" ] ||
  fail "last-run.json after the first check: $(stat -c '%U %a' /var/lib/selfheal/last-run.json 2>&1)"
ok "the first check as $CRON_USER holds the silent row 2 to confirm it: exit 0, no output, the count in $counts; last-run.json written"

# Cron's next run confirms it and marks it.
age_counts "$counts"
set +e
out=$(cd / && as_cron_user selfheal check --config "$tmp/selfheal.toml" 2>&1)
rc=$?
set -e
printf '%s\n' "$out" | sed 's/^/  check| /'
[ "$rc" -eq 0 ] || fail "selfheal check exited $rc"
printf '%s\n' "$out" | grep -q 'full-sync.*2' || fail "check did not report row 2"
rows=$(mariadb -N -B -e "SELECT id, status, end_time IS NOT NULL, error_msg LIKE 'self-heal: dead:%'
  FROM \`$db\`.sync_log ORDER BY id" | tr '\t' ' ' | tr '\n' ';')
[ "$rows" = "1 running 0 0;2 error 1 1;3 done 0 0;" ] || fail "rows after check: $rows"
ok "the second check as $CRON_USER marked the dead row 2 (error, end_time, reason); the beating row 1 is untouched"
journal=/var/lib/selfheal/journal.jsonl
[ "$(stat -c '%U %a' "$journal")" = "$CRON_USER 640" ] || fail "journal: $(stat -c '%U %a' "$journal")"
grep -q '"id":2' "$journal" || fail "journal has no entry for row 2: $(cat "$journal")"
ok "the change is in $journal ($CRON_USER, 640)"

set +e
out=$(cd / && as_cron_user selfheal check --config "$tmp/selfheal.toml" 2>&1)
rc=$?
set -e
[ "$rc" -eq 0 ] && [ -z "$out" ] || fail "second check: exit $rc, output: $out"
ok "the next run: exit 0, no output"

# --- the operator's guide's switch to the systemd timer survives an upgrade ---------------------------
# The cron line commented out: the unit's User= runs selfheal now, and an upgrade (here a
# reinstall, which runs the postinst again) must leave the state directory to it — never give
# it to a user that does not run selfheal — and the timer's command line must still work.
sed -i 's|^\*/10 |# */10 |' /etc/cron.d/selfheal
out=$(dpkg -i --force-confold "$deb" 2>&1) || fail "dpkg -i with the cron line commented out: $out"
unit=/lib/systemd/system/selfheal.service
unit_user=$(sed -n 's/^User=//p' "$unit")
unit_command=$(sed -n 's/^ExecStart=//p' "$unit")
[ "$(stat -c %U /var/lib/selfheal) $(stat -c %U "$journal")" = "$unit_user $unit_user" ] ||
  fail "after the upgrade with the timer: /var/lib/selfheal is $(stat -c %U /var/lib/selfheal), the journal $(stat -c %U "$journal"); want $unit_user"
set +e
# shellcheck disable=SC2086
out=$(cd / && runuser -u "$unit_user" -- $unit_command --config "$tmp/selfheal.toml" 2>&1)
rc=$?
set -e
[ "$rc" -ne 3 ] || fail "the timer's command as $unit_user after the upgrade exited 3: $out"
ok "timer instead of cron: an upgrade leaves /var/lib/selfheal to $unit_user (selfheal.service's User=), whose '$unit_command' runs (exit $rc)"
# A drop-in that names another user: the next upgrade follows it, and says so.
mkdir -p /etc/systemd/system/selfheal.service.d
printf '[Service]\nUser=selfheal\n' >/etc/systemd/system/selfheal.service.d/user.conf
out=$(dpkg -i --force-confold "$deb" 2>&1) || fail "dpkg -i with a drop-in: $out"
[ "$(stat -c %U /var/lib/selfheal)" = selfheal ] || fail "the drop-in's User=selfheal was not followed"
printf '%s\n' "$out" | grep -q "/var/lib/selfheal now belongs to selfheal, named in the User= of selfheal.service" ||
  fail "the postinst did not say what it did: $out"
rm -r /etc/systemd/system/selfheal.service.d
sed -i 's|^# \*/10 |*/10 |' /etc/cron.d/selfheal
dpkg-reconfigure selfheal >/dev/null
[ "$(stat -c %U /var/lib/selfheal) $(stat -c %U "$journal")" = "$CRON_USER $CRON_USER" ] ||
  fail "back to the cron line: /var/lib/selfheal is $(stat -c %U /var/lib/selfheal)"
ok "a drop-in's User= is followed and said; the cron line back, the directory back to $CRON_USER"

# --- TLS through rustls: a private MariaDB that requires TLS, over TCP -------------------------
tls=$tmp/tls
mkdir -p "$tls"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=selfheal test CA" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
  -keyout "$tls/ca.key" -out "$tls/ca.pem" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout "$tls/server.key" \
  -out "$tls/server.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' >"$tls/ext"
openssl x509 -req -in "$tls/server.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca.key" -CAcreateserial \
  -days 2 -extfile "$tls/ext" -out "$tls/server.pem" 2>/dev/null
chmod 644 "$tls/ca.pem"
chown -R mysql:mysql "$tls"
# Its own tmpdir: a starting mariadbd deletes every #sql* file in its tmpdir, which in the
# default /tmp includes the live temporary tables of the host's own server.
mkdir -p "$tls/tmp" && chown mysql:mysql "$tls/tmp"
mariadb-install-db --no-defaults --datadir="$tls/data" --tmpdir="$tls/tmp" --auth-root-authentication-method=socket \
  --skip-test-db --user=mysql >"$tmp/install-db.log" 2>&1 || fail "mariadb-install-db: $(tail -n 5 "$tmp/install-db.log")"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
start-stop-daemon --start --background --pidfile "$tls/pid" --exec /usr/sbin/mariadbd -- \
  --no-defaults --datadir="$tls/data" --tmpdir="$tls/tmp" --socket="$tls/s.sock" --pid-file="$tls/pid" --user=mysql \
  --port="$port" --bind-address=127.0.0.1 --ssl-cert="$tls/server.pem" --ssl-key="$tls/server.key" \
  --ssl-ca="$tls/ca.pem" --log-error="$tls/error.log"
stop_tls() {
  local pid
  pid=$(cat "$tls/pid" 2>/dev/null) || return 0
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  rm -f "$tls/pid"
}
trap 'stop_tls; cleanup' EXIT
for _ in $(seq 1 100); do mariadb -S "$tls/s.sock" -e 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.2; done
mariadb -S "$tls/s.sock" <<SQL || fail "the private TLS server did not start: $(tail -n 5 "$tls/error.log")"
CREATE DATABASE app;
CREATE USER 'tls'@'%' IDENTIFIED BY '$pass' REQUIRE SSL;
GRANT SELECT, UPDATE ON app.* TO 'tls'@'%';
CREATE TABLE app.sync_log (id INT PRIMARY KEY, status VARCHAR(16) NOT NULL, start_time DATETIME,
  end_time DATETIME, error_msg VARCHAR(255) NOT NULL DEFAULT '', KEY idx_status (status));
INSERT INTO app.sync_log VALUES (2, 'running', NOW() - INTERVAL 50 MINUTE, NULL, '');
SQL
tls_check() { # URL query; confirm 1: this is about the connection, not about when to act
  (cd / && as_cron_user selfheal check --config "$tmp/selfheal.toml" --confirm 1 \
    --db "mysql://tls@127.0.0.1:$port/app?prefer_socket=false$1" 2>&1)
}
set +e
out=$(tls_check "")
rc=$?
set -e
[ "$rc" -eq 3 ] || fail "without TLS, a REQUIRE SSL user got in (exit $rc): $out"
set +e
out=$(tls_check "&root_cert_path=$tls/ca.pem")
rc=$?
set -e
[ "$rc" -eq 0 ] || fail "check over TLS exited $rc: $out"
[ "$(mariadb -S "$tls/s.sock" -N -B -e 'SELECT status FROM app.sync_log WHERE id = 2')" = error ] ||
  fail "check over TLS did not mark the dead row"
ldd /usr/bin/selfheal | grep -Eq 'libssl|libcrypto|libsqlite' && fail "selfheal links $(ldd /usr/bin/selfheal)"
ok "TLS through rustls to a server that requires it (root_cert_path=CA), and no libssl/libsqlite3 linked"
stop_tls

# --- dpkg-reconfigure follows a change of the cron user ---------------------------------------
sed -i "s/^\(\*\/10 \* \* \* \*\) $CRON_USER /\1 selfheal /" /etc/cron.d/selfheal
dpkg-reconfigure selfheal
[ "$(stat -c %U /var/lib/selfheal) $(stat -c %U "$journal")" = "selfheal selfheal" ] ||
  fail "after dpkg-reconfigure: $(stat -c %U /var/lib/selfheal) $(stat -c %U "$journal")"
ok "after switching the cron line to selfheal, dpkg-reconfigure gave it the state directory"

# --- remove: conffiles and state stay, the cron line is quiet ----------------------------------
dpkg -r selfheal
[ "$(installed)" = "deinstall ok config-files" ] || fail "status after dpkg -r: $(installed)"
[ ! -e /usr/bin/selfheal ] || fail "/usr/bin/selfheal still there after dpkg -r"
[ -f /etc/selfheal/selfheal.toml ] && [ -f /etc/cron.d/selfheal ] || fail "dpkg -r removed a conffile"
[ -f "$journal" ] || fail "dpkg -r removed the journal"
set +e
out=$(cd / && runuser -u "$CRON_USER" -- sh -c "$cron_cmd" 2>&1)
set -e
[ -z "$out" ] || fail "the cron line prints after dpkg -r: $out"
ok "dpkg -r: binary gone; conffiles and journal kept; the cron line prints nothing"

# --- purge: all gone ---------------------------------------------------------------------------
# A timer someone enabled while the package was installed: purge removes the link.
mkdir -p /etc/systemd/system/timers.target.wants
ln -s /lib/systemd/system/selfheal.timer /etc/systemd/system/timers.target.wants/selfheal.timer
dpkg -P selfheal
[ ! -L /etc/systemd/system/timers.target.wants/selfheal.timer ] || fail "dpkg -P left the enabled timer's link"
case "$(installed)" in "" | "unknown ok not-installed") ;; *) fail "status after dpkg -P: $(installed)" ;; esac
for p in /etc/selfheal /etc/cron.d/selfheal /var/lib/selfheal; do
  [ ! -e "$p" ] || fail "$p is still there after dpkg -P"
done
ok "dpkg -P: conffiles, /etc/selfheal and /var/lib/selfheal are gone (the user stays)"

# --- lintian -----------------------------------------------------------------------------------
say "lintian $(basename "$deb")"
lintian --display-info --fail-on error,warning "$deb" | sed 's/^/  lintian| /'
ok "lintian: no errors, no warnings"
