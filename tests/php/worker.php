<?php
// A job worker the way the field reports describe one, for selfheal's end-to-end tests:
// it takes an flock on its lock file (and holds it for the whole run), inserts its
// `running` row into sync_log with its owner as HOST:PID, touches its heartbeat file every
// second while it works, and on success sets `done`, the end time and an empty message
// (the success path must clear what a watchdog may have written).
//
//   php worker.php --dsn DSN --user USER --lock PATH --heartbeat TEMPLATE --work SECONDS
//                  [--stall-after BEATS]
//
// The password, if any, comes from $DB_PASSWORD. {id} in the heartbeat template becomes the
// row id. With --stall-after the heartbeat stops after that many beats while the process
// lives on, stuck in a long call (a hung job). Prints "started ID PID", "stalled" and
// "done ID" on stdout; exits 75 when another worker holds the lock.

$o = getopt('', ['dsn:', 'user:', 'lock:', 'heartbeat:', 'work:', 'stall-after:']);
foreach (['dsn', 'user', 'lock', 'heartbeat', 'work'] as $k) {
    if (!isset($o[$k])) {
        fwrite(STDERR, "worker.php: --$k is required\n");
        exit(2);
    }
}
$work = (int) $o['work'];
$stallAfter = isset($o['stall-after']) ? (int) $o['stall-after'] : null;

$lock = fopen($o['lock'], 'c');
if ($lock === false) {
    fwrite(STDERR, "worker.php: cannot open {$o['lock']}\n");
    exit(1);
}
if (!flock($lock, LOCK_EX | LOCK_NB)) {
    fwrite(STDERR, "worker.php: another worker holds {$o['lock']}\n");
    exit(75);
}

$pdo = new PDO($o['dsn'], $o['user'], getenv('DB_PASSWORD') ?: null, [
    PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION,
]);
$pdo->prepare("INSERT INTO sync_log (status, start_time, worker) VALUES ('running', NOW(), ?)")
    ->execute([gethostname() . ':' . getmypid()]);
$id = (int) $pdo->lastInsertId();
$heartbeat = str_replace('{id}', (string) $id, $o['heartbeat']);
echo "started $id " . getmypid() . "\n";

for ($beat = 0; $beat < $work; $beat++) {
    if ($stallAfter !== null && $beat >= $stallAfter) {
        echo "stalled\n";
        sleep(3600); // a call that never returns; the heartbeat stops, the process lives
    }
    touch($heartbeat);
    sleep(1);
}

$pdo->prepare("UPDATE sync_log SET status = 'done', end_time = NOW(), error_msg = '' WHERE id = ?")
    ->execute([$id]);
flock($lock, LOCK_UN);
fclose($lock);
echo "done $id\n";
