<?php
// One run of a Magento 1 / OpenMage cron job as Mage_Cron_Model_Observer::_processJob takes
// its steps, with Aoe_Scheduler's `host` and `pid` columns, for selfheal's recipe tests:
//   1. the pending -> running compare-and-set (Mage_Cron_Model_Schedule::tryLockJob);
//   2. Aoe_Scheduler's host (gethostname()) and pid (getmypid()), executed_at (UTC);
//   3. the work; 4. the final status and finished_at.
// No database lock: the recipe runs cron.php under `flock -n`, whose lock this process
// inherits.
//
//   php openmage_cron.php --dsn DSN --user USER --job JOB_CODE --work SECONDS
//
// The password, if any, comes from $DB_PASSWORD. Prints "running ID PID" or "blocked", and
// "done ID" at the end.

$o = getopt('', ['dsn:', 'user:', 'job:', 'work:']);
foreach (['dsn', 'user', 'job', 'work'] as $k) {
    if (!isset($o[$k])) {
        fwrite(STDERR, "openmage_cron.php: --$k is required\n");
        exit(2);
    }
}
$pdo = new PDO($o['dsn'], $o['user'], getenv('DB_PASSWORD') ?: null, [
    PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION,
]);
$st = $pdo->prepare(
    "SELECT schedule_id FROM cron_schedule WHERE job_code = ? AND status = 'pending' "
    . 'ORDER BY scheduled_at, schedule_id LIMIT 1'
);
$st->execute([$o['job']]);
$id = $st->fetchColumn();
$locked = 0;
if ($id !== false) {
    $st = $pdo->prepare(
        "UPDATE cron_schedule SET status = 'running' WHERE schedule_id = ? AND status = 'pending'"
    );
    $st->execute([$id]);
    $locked = $st->rowCount();
}
if ($locked !== 1) {
    echo "blocked\n";
    exit(3);
}
$pdo->prepare(
    'UPDATE cron_schedule SET host = ?, pid = ?, executed_at = UTC_TIMESTAMP() WHERE schedule_id = ?'
)->execute([gethostname(), getmypid(), $id]);
echo "running $id " . getmypid() . "\n";
flush();

sleep((int) $o['work']);

$pdo->prepare(
    "UPDATE cron_schedule SET status = 'success', finished_at = UTC_TIMESTAMP() WHERE schedule_id = ?"
)->execute([$id]);
echo "done $id\n";
