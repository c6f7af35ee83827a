<?php
// A job that uses selfheal's PHP helper (php/Selfheal/Job.php), for the end-to-end tests
// in tests/php/helper.rs:
//
//   php helper_job.php --lock PATH [--wait S] [--heartbeat PATH] [--every S]
//                      [--dsn DSN --user USER] [--work S] [--gate PATH] [--out PATH]
//
// Takes the lock with the helper (exit 75 and the exception's message on stderr when it is
// not obtained), then with --dsn inserts its `running` row into sync_log with
// Selfheal\Job::owner() as the worker, prints "started ID PID", and works: calls beat() on
// every iteration of a busy loop (10 ms a round) until --work seconds have passed or the
// --gate file exists; appends "PID" to --out when it got the lock; on success sets `done`.

require __DIR__ . '/../../php/Selfheal/Job.php';

$o = getopt('', ['lock:', 'wait:', 'heartbeat:', 'every:', 'dsn:', 'user:', 'work:', 'gate:', 'out:']);
$options = ['lock' => $o['lock']];
foreach (['wait', 'heartbeat', 'every'] as $k) {
    if (isset($o[$k])) {
        $options[$k] = $k === 'heartbeat' ? $o[$k] : (float) $o[$k];
    }
}
try {
    $job = Selfheal\Job::start($options);
} catch (Selfheal\LockNotObtained $e) {
    fwrite(STDERR, 'helper_job.php: ' . $e->getMessage() . "\n");
    exit($e->getCode());
}
if (isset($o['out'])) {
    file_put_contents($o['out'], getmypid() . "\n", FILE_APPEND);
}
$id = 0;
$pdo = null;
if (isset($o['dsn'])) {
    $pdo = new PDO($o['dsn'], $o['user'], getenv('DB_PASSWORD') ?: null, [
        PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION,
    ]);
    $pdo->prepare("INSERT INTO sync_log (status, start_time, worker) VALUES ('running', NOW(), ?)")
        ->execute([Selfheal\Job::owner()]);
    $id = (int) $pdo->lastInsertId();
}
echo "started $id " . getmypid() . "\n";

$until = microtime(true) + (isset($o['work']) ? (float) $o['work'] : 0);
while (microtime(true) < $until && !(isset($o['gate']) && file_exists($o['gate']))) {
    usleep(10000);
    $job->beat();
}

if ($pdo !== null) {
    $pdo->prepare("UPDATE sync_log SET status = 'done', end_time = NOW(), error_msg = '' WHERE id = ?")
        ->execute([$id]);
}
$job->release();
echo "done $id\n";
