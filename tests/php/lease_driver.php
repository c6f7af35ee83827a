<?php
// Workers that use selfheal's Selfheal\Lease (php/Selfheal/Lease.php), for the end-to-end
// tests in tests/php/lease.rs. The password, if any, comes from $DB_PASSWORD.
//
//   php lease_driver.php --mode repl --dsn DSN [--user U] --spec JSON [--errmode silent]
//       One command per line on stdin (JSON), one JSON answer per line on stdout:
//       {"op":"claim","id":5} {"op":"claimNext"} {"op":"stillMine"}
//       {"op":"beat"} (after 2 ms, so that with every = 0.001 it is due)
//       {"op":"finish","status":"done","message":""} {"op":"retryLater","reason":"r","seconds":60}
//       {"op":"work","gate":PATH,"pause_ms":20}: beat() every pause until LeaseLost or the
//           gate file exists; answers with the beats made and the outcome
//       {"op":"beats","n":N,"pause_ms":P}: N beats P ms apart; answers with how many renewed
//       {"op":"begin"} {"op":"commit"} {"op":"rollback"} {"op":"errmode"} {"op":"connection_id"}
//       {"op":"sql","sql":…} runs a statement on the worker's connection
//       {"op":"spec","spec":{…}} replaces the specification for the next claims.
//       "as": NAME keeps several leases apart (default "a"). An answer is
//       {"ok":true,"result":…} or {"ok":false,"class":…,"message":…,"code":…} with, for a
//       LeaseLost, "status_now" and "owner_now".
//   php lease_driver.php --mode race --dsn DSN --spec JSON --id ID --rounds N --dir DIR
//       For each round r: prints "ready r", waits until DIR/go-r exists (spinning), claims
//       row ID and prints "r won" or "r lost".
//   php lease_driver.php --mode next --dsn DSN --spec JSON --dir DIR
//       Prints "ready", waits until DIR/go exists, then claims with claimNext() and finishes
//       'done' until it returns null, printing "claimed ID" for each; then "end N".

require __DIR__ . '/../../php/Selfheal/Lease.php';

$o = getopt('', ['mode:', 'dsn:', 'user:', 'spec:', 'id:', 'rounds:', 'dir:', 'errmode:']);
$mode = isset($o['mode']) ? $o['mode'] : '';
if (!isset($o['dsn'], $o['spec'])) {
    fwrite(STDERR, "lease_driver.php: --dsn and --spec are required\n");
    exit(2);
}
$pdo = new PDO($o['dsn'], isset($o['user']) ? $o['user'] : null, getenv('DB_PASSWORD') ?: null);
$pdo->setAttribute(
    PDO::ATTR_ERRMODE,
    isset($o['errmode']) && $o['errmode'] === 'silent' ? PDO::ERRMODE_SILENT : PDO::ERRMODE_EXCEPTION
);
$spec = json_decode($o['spec'], true);

function say($line)
{
    fwrite(STDOUT, $line . "\n");
    fflush(STDOUT);
}

function wait_for($file)
{
    while (!file_exists($file)) {
        usleep(50);
        clearstatcache(false, $file);
    }
}

if ($mode === 'race') {
    for ($r = 1; $r <= (int) $o['rounds']; $r++) {
        say("ready $r");
        wait_for("{$o['dir']}/go-$r");
        $lease = Selfheal\Lease::claim($pdo, $spec, $o['id']);
        say($lease === null ? "$r lost" : "$r won");
    }
    exit(0);
}

if ($mode === 'next') {
    say('ready');
    wait_for("{$o['dir']}/go");
    $n = 0;
    while (($lease = Selfheal\Lease::claimNext($pdo, $spec)) !== null) {
        say('claimed ' . $lease->id());
        $lease->finish('done');
        $n++;
    }
    say("end $n");
    exit(0);
}

if ($mode !== 'repl') {
    fwrite(STDERR, "lease_driver.php: mode repl, race or next\n");
    exit(2);
}

$leases = [];
while (($line = fgets(STDIN)) !== false) {
    $c = json_decode($line, true);
    $as = isset($c['as']) ? $c['as'] : 'a';
    try {
        switch ($c['op']) {
            case 'spec':
                $spec = $c['spec'];
                $result = true;
                break;
            case 'claim':
            case 'claimNext':
                $lease = $c['op'] === 'claim'
                    ? Selfheal\Lease::claim($pdo, $spec, $c['id'])
                    : Selfheal\Lease::claimNext($pdo, $spec);
                if ($lease !== null) {
                    $leases[$as] = $lease;
                }
                $result = $lease === null ? null : [
                    'id' => (string) $lease->id(),
                    'owner' => $lease->owner(),
                    'started' => $lease->started(),
                    'pid' => getmypid(),
                ];
                break;
            case 'beat':
                usleep(2000);   // past 'every' of the tests' specifications (1 ms): due
                $result = $leases[$as]->beat();
                break;
            case 'stillMine':
                $result = $leases[$as]->stillMine();
                break;
            case 'finish':
                $leases[$as]->finish($c['status'], isset($c['message']) ? $c['message'] : '');
                $result = true;
                break;
            case 'retryLater':
                $result = $leases[$as]->retryLater($c['reason'], $c['seconds']);
                break;
            case 'work':
                $beats = 0;
                $t0 = microtime(true);
                try {
                    while (!file_exists($c['gate'])) {
                        if ($leases[$as]->beat()) {
                            $beats++;
                        }
                        usleep($c['pause_ms'] * 1000);
                        clearstatcache(false, $c['gate']);
                    }
                } catch (Selfheal\LeaseLost $e) {
                    say(json_encode([
                        'ok' => false,
                        'class' => get_class($e),
                        'message' => $e->getMessage(),
                        'code' => $e->getCode(),
                        'status_now' => $e->statusNow(),
                        'owner_now' => $e->ownerNow(),
                        'beats' => $beats,
                        'noticed_at' => microtime(true),
                    ]));
                    continue 2;
                }
                $result = ['beats' => $beats, 'seconds' => microtime(true) - $t0];
                break;
            case 'beats':
                $result = 0;
                for ($i = 0; $i < $c['n']; $i++) {
                    usleep($c['pause_ms'] * 1000);
                    if ($leases[$as]->beat()) {
                        $result++;
                    }
                }
                break;
            case 'sql':
                $result = $pdo->exec($c['sql']);
                break;
            case 'begin':
                $result = $pdo->beginTransaction();
                break;
            case 'commit':
                $result = $pdo->commit();
                break;
            case 'rollback':
                $result = $pdo->rollBack();
                break;
            case 'errmode':
                $result = $pdo->getAttribute(PDO::ATTR_ERRMODE);
                break;
            case 'connection_id':
                $result = (int) $pdo->query('SELECT CONNECTION_ID()')->fetchColumn();
                break;
            default:
                throw new InvalidArgumentException("unknown op {$c['op']}");
        }
        say(json_encode(['ok' => true, 'result' => $result]));
    } catch (Exception $e) {
        $answer = [
            'ok' => false,
            'class' => get_class($e),
            'message' => $e->getMessage(),
            'code' => $e->getCode(),
            'previous' => $e->getPrevious() ? get_class($e->getPrevious()) : null,
        ];
        if ($e instanceof Selfheal\LeaseLost) {
            $answer['status_now'] = $e->statusNow();
            $answer['owner_now'] = $e->ownerNow();
        }
        say(json_encode($answer));
    }
}
