<?php
// One run of a Magento 2 cron job, in the order Magento's own ProcessCronQueueObserver
// takes its steps, against the real cron_schedule schema, for selfheal's recipe tests:
//   1. the job's lock: GET_LOCK('<dbname>|CRON_' . md5(group . '_' . job_code), 0), the
//      name built as Magento's Lock\Backend\Database builds it (the database name and '|'
//      as its prefix; a name beyond 64 characters becomes prefix . md5(name));
//   2. the pending -> running compare-and-set of the oldest pending row of the job code,
//      refused while another row of the code is running (trySetJobUniqueStatusAtomic);
//   3. executed_at (UTC), then the work;
//   4. the lock released, then the final status and finished_at.
//
//   php magento2_cron.php --dsn DSN --user USER --group GROUP --job JOB_CODE --work SECONDS
//
// The password, if any, comes from $DB_PASSWORD. Prints "lock NAME", then "running ID PID"
// or "blocked" (no pending row could be set running), and "done ID" at the end; exits 75
// when the lock is held by someone else, 3 when the run is blocked.

$o = getopt('', ['dsn:', 'user:', 'group:', 'job:', 'work:']);
foreach (['dsn', 'user', 'group', 'job', 'work'] as $k) {
    if (!isset($o[$k])) {
        fwrite(STDERR, "magento2_cron.php: --$k is required\n");
        exit(2);
    }
}
$pdo = new PDO($o['dsn'], $o['user'], getenv('DB_PASSWORD') ?: null, [
    PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION,
]);
$one = function ($sql, $args = []) use ($pdo) {
    $st = $pdo->prepare($sql);
    $st->execute($args);
    return $st->fetchColumn();
};

// Lock\Backend\Database::addPrefix and ExpressionConverter::shortenEntityName.
$dbname = (string) $one('SELECT DATABASE()');
$prefix = $dbname !== '' ? $dbname . '|' : '';
$name = 'CRON_' . md5($o['group'] . '_' . $o['job']);
$lockName = $prefix . $name;
if (strlen($lockName) > 64) {
    $lockName = $prefix . md5($name);
}
echo "lock $lockName\n";
if ((int) $one('SELECT GET_LOCK(?, 0)', [$lockName]) !== 1) {
    fwrite(STDERR, "magento2_cron.php: $lockName is held\n");
    exit(75);
}

$id = $one(
    "SELECT schedule_id FROM cron_schedule WHERE job_code = ? AND status = 'pending' "
    . 'ORDER BY scheduled_at, schedule_id LIMIT 1',
    [$o['job']]
);
$locked = 0;
if ($id !== false) {
    // Schedule::tryLockJob -> ResourceModel\Schedule::trySetJobUniqueStatusAtomic.
    $st = $pdo->prepare(
        'UPDATE cron_schedule AS current '
        . 'LEFT JOIN cron_schedule AS existing ON existing.job_code = current.job_code '
        . 'AND existing.status = :newStatus '
        . 'AND (existing.executed_at > UTC_TIMESTAMP() - INTERVAL 1 DAY OR existing.executed_at IS NULL) '
        . 'SET current.status = :newStatus '
        . 'WHERE current.schedule_id = :scheduleId AND current.status = :currentStatus '
        . 'AND existing.schedule_id IS NULL'
    );
    $st->execute(['newStatus' => 'running', 'currentStatus' => 'pending', 'scheduleId' => $id]);
    $locked = $st->rowCount();
}
if ($locked !== 1) {
    $one('SELECT RELEASE_LOCK(?)', [$lockName]);
    echo "blocked\n";
    exit(3);
}
$pdo->prepare('UPDATE cron_schedule SET executed_at = UTC_TIMESTAMP() WHERE schedule_id = ?')
    ->execute([$id]);
echo "running $id " . getmypid() . "\n";
flush();

sleep((int) $o['work']);

$one('SELECT RELEASE_LOCK(?)', [$lockName]);
$pdo->prepare(
    "UPDATE cron_schedule SET status = 'success', finished_at = UTC_TIMESTAMP() WHERE schedule_id = ?"
)->execute([$id]);
echo "done $id\n";
