<?php
/*
 * Selfheal\Lease: the job's side of the lease loop selfheal watches (selfheal(1), section
 * LEASE; docs/design.md#lease). A worker claims a row with one compare-and-set, renews its lease
 * while it works, and finishes it — every write fenced, so a worker whose row was taken away
 * (reclaimed by selfheal while it looked dead, resolved by a person, changed by another
 * tool, claimed again by a successor) finds out at its next beat and never writes its late
 * result over what came after it.
 *
 *   require '/usr/share/selfheal/php/Selfheal/Lease.php';
 *   $spec = ['table' => 'sync_log', 'started_column' => 'start_time',
 *            'owner_column' => 'worker', 'heartbeat_column' => 'heartbeat_at',
 *            'retry_value' => 'pending', 'attempts_column' => 'attempts',
 *            'retry_at_column' => 'retry_at', 'ended_column' => 'end_time',
 *            'message_column' => 'error_msg'];
 *   while ($lease = Selfheal\Lease::claimNext($pdo, $spec)) {
 *       try {
 *           foreach (itemsOf($lease->id()) as $item) { work($item); $lease->beat(); }
 *           $lease->finish('done');
 *       } catch (TemporaryFailure $e) {
 *           $lease->retryLater($e->getMessage(), 60);
 *       } catch (Selfheal\LeaseLost $e) {
 *           error_log($e->getMessage());          // the row is someone else's now: stop
 *       }
 *   }
 *
 * The specification is an array keyed by the names of the watch's own keys, with the
 * watch's defaults: table (required), id_column ("id"), status_column ("status"),
 * running_value ("running"), started_column (required), owner_column (required: it fences
 * every write), heartbeat_column, heartbeat_file (may contain {id}), ended_column,
 * message_column, retry_value, retry_at_column, attempts_column, max_attempts,
 * manual_value, dead_value ("error"), match (column => value: only rows of this job kind),
 * plus claimable_values (statuses a claim takes a row from; default ['pending'], and
 * retry_value when it is another status), every (seconds between two heartbeat writes;
 * default 10) and timezone (the zone naive DATETIME values are written in, as selfheal's
 * [database] timezone: a zone name such as 'Europe/Berlin', or '+HH:MM'/'-HH:MM'; default
 * the server's global time zone on MySQL, the server's TimeZone setting on PostgreSQL, UTC
 * on SQLite). The watch's other keys (name, stale_after, max_age, lock_file, …) are
 * accepted and not used, so one array can describe both sides; any other key is an error.
 *
 * Guarantees:
 *   - Every write is a compare-and-set whose guard is the row's id, the owner ("HOST:PID",
 *     Selfheal\Job::owner()) and the start value this worker's claim wrote, and a status
 *     in (running_value, manual_value). selfheal changes a row's status, never its owner
 *     or start; so a row selfheal parked as hung is still this worker's (beat() renews it,
 *     selfheal un-parks it), and a row it reclaimed, or a person resolved, is not.
 *     A lease found lost stays lost: every later call throws LeaseLost and writes
 *     nothing. One process claiming the same row twice within one second (same owner,
 *     same start: the guard cannot tell them apart) supersedes its older lease.
 *   - Claims are refused inside an open transaction or with autocommit off (the claim
 *     would stay invisible until a commit — the single-transaction design the lease
 *     replaces), beat() inside a transaction likewise; finish(), retryLater() and
 *     stillMine() may run inside one, with the job's own last business write.
 *   - Times are the database's own (UTC_TIMESTAMP(), NOW(), UNIX_TIMESTAMP(), SQLite's
 *     'now', PostgreSQL's CURRENT_TIMESTAMP), never PHP's clock, and whatever time_zone the
 *     connection's session set: a DATETIME (or text; PostgreSQL: timestamp) column gets the
 *     database's UTC time converted to timezone (by its offset now, computed by PHP:
 *     CONVERT_TZ knows no zone names unless the server's time zone tables are loaded), else
 *     to the server's global zone (MySQL), the server's TimeZone as a session that sets
 *     none has it (PostgreSQL) or UTC (SQLite) — the zone selfheal reads it in; retry_at is
 *     compared in that same zone. A TIMESTAMP (MySQL, stored as UTC) gets NOW(), a
 *     PostgreSQL timestamptz CURRENT_TIMESTAMP (both compared by their instant), integer
 *     columns unix seconds. Start, heartbeat, end and retry_at columns may be
 *     DATETIME/TIMESTAMP (SQLite: text; PostgreSQL: timestamp, timestamptz or text) or
 *     integer unix seconds; the column types are read once per connection and table.
 *   - A start, heartbeat, end or retry_at column declared ON UPDATE CURRENT_TIMESTAMP
 *     (which moves on every UPDATE that does not set it) is assigned to itself by every
 *     write that does not set it, so the start the guard compares stays what the claim
 *     wrote.
 *   - Identifiers are validated (letters, digits, _; a table may be database.table) and
 *     quoted; every value is a bound parameter.
 *   - A database error is a \RuntimeException naming what failed (whatever the connection's
 *     PDO::ATTR_ERRMODE; it is restored afterwards); a lost lease is Selfheal\LeaseLost;
 *     a misuse (bad specification, a claim inside an open transaction) is a
 *     \InvalidArgumentException or \LogicException. Nothing fails as a silent false.
 *
 * PHP 7.0 or newer, PDO with pdo_mysql (MySQL/MariaDB 5.6+), pdo_pgsql (PostgreSQL 10+) or
 * pdo_sqlite; placeholders are PDO's own `?` (pdo_pgsql sends them as $n). Without Composer:
 * require this file (it loads Job.php and LeaseLost.php beside it). With Composer, add the
 * directory to the classmap: "autoload": {"classmap": ["/usr/share/selfheal/php/"]}.
 * Part of selfheal; installed in /usr/share/selfheal/php/.
 */

namespace Selfheal;

require_once __DIR__ . '/Job.php';
require_once __DIR__ . '/LeaseLost.php';

class Lease
{
    /** Candidate rows claimNext() reads at a time. */
    const CANDIDATES = 16;

    /** Rounds of candidates claimNext() tries, each lost to other workers, before it returns null. */
    const ROUNDS = 20;

    /** Connections and tables whose column types are kept. */
    const CACHED_TABLES = 8;

    /** Keys this class uses, with their defaults (null: none). */
    private static $keys = array(
        'table' => null,
        'id_column' => 'id',
        'status_column' => 'status',
        'running_value' => 'running',
        'started_column' => null,
        'owner_column' => null,
        'heartbeat_column' => null,
        'heartbeat_file' => null,
        'ended_column' => null,
        'message_column' => null,
        'retry_value' => null,
        'retry_at_column' => null,
        'attempts_column' => null,
        'max_attempts' => null,
        'manual_value' => null,
        'dead_value' => 'error',
        'match' => null,
        'claimable_values' => null,
        'every' => 10,
        'timezone' => null,
    );

    /** selfheal's other watch keys: accepted, not used here. */
    private static $otherWatchKeys = array(
        'name', 'host', 'stale_after', 'max_age', 'lock_file', 'overtime', 'release_lock',
        'confirm', 'success_values', 'retry_backoff', 'retry_backoff_max', 'report_file',
    );

    /** @var int[]|null known time zone names (as keys), read once */
    private static $zoneNames = null;

    /** @var array[] column types by connection and table: [PDO, columns] */
    private static $columnCache = array();

    /** @var int[] the newest lease this process claimed, by connection, row and start */
    private static $newest = array();

    /** @var int leases this process claimed */
    private static $claims = 0;

    /** @var \PDO */
    private $pdo;

    /** @var array the validated specification (see plan()) */
    private $p;

    /** @var int|string */
    private $id;

    /** @var string "HOST:PID" */
    private $owner;

    /** @var int|float|string the start value as the guard compares it */
    private $startGuard;

    /** @var string the start value as the row holds it */
    private $started;

    /** @var int|float nanoseconds between two heartbeat writes */
    private $every;

    /** @var int|float when beat() next writes, on the clock of now() */
    private $nextBeat;

    /** @var Job|null touches heartbeat_file */
    private $job = null;

    /** @var string held, lost or ended */
    private $state = 'held';

    /** @var array|null [status, owner] of the row when the loss was found */
    private $lostAs = null;

    /** @var bool */
    private $hrtime;

    /** @var string this lease's key in $newest */
    private $key;

    /** @var int this lease's number in $newest */
    private $n;

    /**
     * Claims row $id: one compare-and-set from a claimable status (and, with retry_at_column,
     * a retry_at that is due) to running_value, writing the owner, the start and the
     * heartbeat (the database's now), clearing the end time and the message.
     *
     * @param \PDO       $pdo  a connection with autocommit on, not inside a transaction
     * @param array      $spec see the top of this file
     * @param int|string $id
     * @return Lease|null the lease, or null when the row was not claimable (another worker
     *                    won, it is not due, or there is no such row)
     * @throws \InvalidArgumentException a bad specification, or a table without its columns
     * @throws \LogicException           inside an open transaction, or autocommit off
     * @throws \RuntimeException         the database failed
     */
    public static function claim(\PDO $pdo, array $spec, $id)
    {
        $p = self::plan($pdo, $spec);
        self::checkId($p, $id);
        self::checkConnection($pdo, 'claim');
        return self::tryClaim($pdo, $p, $id);
    }

    /**
     * Claims the first claimable row it can win: reads a short list of candidates (oldest
     * id first) and tries a compare-and-set on each, starting at a random one so that
     * workers asking at once spread over the list; reads a new list when every candidate
     * went to other workers. No row locks are held between the read and the claims.
     *
     * @return Lease|null null when no row is claimable now (or every try for a while was won
     *                    by other workers: ask again)
     * @throws \InvalidArgumentException|\LogicException|\RuntimeException as claim()
     */
    public static function claimNext(\PDO $pdo, array $spec)
    {
        $p = self::plan($pdo, $spec);
        self::checkConnection($pdo, 'claimNext');
        for ($round = 0; $round < self::ROUNDS; $round++) {
            $ids = self::candidates($pdo, $p);
            $n = count($ids);
            if ($n === 0) {
                return null;
            }
            $first = mt_rand(0, $n - 1);
            for ($i = 0; $i < $n; $i++) {
                $id = $ids[($first + $i) % $n];
                self::checkId($p, $id);
                $lease = self::tryClaim($pdo, $p, $id);
                if ($lease !== null) {
                    return $lease;
                }
            }
        }
        return null;
    }

    /** The row's id. */
    public function id()
    {
        return $this->id;
    }

    /** "HOST:PID" this lease was claimed as (Selfheal\Job::owner() at the claim). */
    public function owner()
    {
        return $this->owner;
    }

    /** The start value the claim wrote, as the row holds it. */
    public function started()
    {
        return $this->started;
    }

    /**
     * Renews the lease if the last renewal is at least 'every' seconds ago: the heartbeat
     * column to the database's now (and the heartbeat file touched), under the guard. Without
     * a heartbeat column it reads the row under the guard instead. Call it as often as you
     * like: when it is not due it reads a clock and compares. Returns whether it renewed.
     *
     * A row parked in manual_value (selfheal found it hung) is still this worker's: renewed,
     * no exception. Outside a transaction only (a heartbeat inside one is invisible to
     * selfheal until the commit).
     *
     * @throws LeaseLost        the row is no longer this worker's: stop working on it
     * @throws \LogicException  the lease is finished, or a transaction is open
     * @throws \RuntimeException the database failed
     */
    public function beat()
    {
        $this->usable('beat');
        $now = $this->now();
        if ($now < $this->nextBeat) {
            return false;
        }
        if ($this->pdo->inTransaction()) {
            throw new \LogicException(
                'Selfheal\\Lease: beat() inside an open transaction: the heartbeat would stay '
                . 'invisible to selfheal until the commit; beat between transactions'
            );
        }
        $this->nextBeat = $now + $this->every;
        $p = $this->p;
        $what = 'renewing the lease of ' . $this->rowName();
        if ($p['heartbeat_column'] !== null) {
            $params = array();
            $sets = array_merge(
                array("{$p['heartbeat_column']} = " . self::nowSql($p, 'heartbeat')),
                self::kept($p, array('heartbeat'))
            );
            $n = self::write(
                $this->pdo,
                $what,
                "UPDATE {$p['t']} SET " . implode(', ', $sets) . ' WHERE ' . $this->guard($params),
                $params
            );
            // MySQL counts changed rows only: a second beat within the same second changes
            // nothing and reports 0. Read the row once before calling the lease lost.
            if ($n === 0 && !$this->holds($what)) {
                $this->lose('beat');
            }
        } elseif (!$this->holds($what)) {
            $this->lose('beat');
        }
        if ($this->job !== null) {
            $this->job->beat();
        }
        return true;
    }

    /**
     * Ends the lease: status, end time (the database's now) and message (cut to the column's
     * length; '' clears what a watchdog wrote), under the guard.
     *
     * @param string $status the final status (not running_value)
     * @param string $message
     * @throws LeaseLost the row is no longer this worker's: nothing was written
     * @throws \InvalidArgumentException|\LogicException|\RuntimeException
     */
    public function finish($status, $message = '')
    {
        $this->usable('finish');
        $status = self::statusValue($status, 'finish(): the status');
        if ($status === $this->p['running_value']) {
            throw new \InvalidArgumentException(
                "Selfheal\\Lease: finish('$status'): that is running_value; a lease is renewed "
                . 'with beat(), and ends with a final status'
            );
        }
        $this->end('finish', $status, $message, array(), array());
    }

    /**
     * The worker's own retryable failure: the row goes to retry_value, with retry_at the
     * database's now plus $seconds, attempts raised by one and $reason as the message — as
     * a reclaim by selfheal does. With max_attempts, a row whose attempts are used up goes
     * to manual_value (or dead_value) instead. Returns the status written.
     *
     * @param string    $reason
     * @param int|float $seconds how long the row waits before it is claimable again (0: at
     *                           once); more than 0 needs retry_at_column
     * @throws LeaseLost the row is no longer this worker's: nothing was written
     * @throws \InvalidArgumentException|\LogicException|\RuntimeException
     */
    public function retryLater($reason, $seconds)
    {
        $this->usable('retryLater');
        $p = $this->p;
        if ($p['retry_value'] === null) {
            throw new \LogicException(
                'Selfheal\\Lease: retryLater() needs retry_value in the specification '
                . '(the status that sends a row back to the queue)'
            );
        }
        if (!is_int($seconds) && !is_float($seconds)
            && !(is_string($seconds) && is_numeric($seconds))) {
            throw new \InvalidArgumentException(
                'Selfheal\\Lease: retryLater(): $seconds must be a number of seconds'
            );
        }
        $seconds = (int) ceil((float) $seconds);
        if ($seconds < 0 || $seconds > 100000000) {
            throw new \InvalidArgumentException(
                "Selfheal\\Lease: retryLater(): $seconds seconds is out of range (0 to 100000000)"
            );
        }
        if ($seconds > 0 && $p['retry_at_column'] === null) {
            throw new \InvalidArgumentException(
                "Selfheal\\Lease: retryLater(…, $seconds) needs retry_at_column to make the row "
                . 'wait; without it use 0 (claimable at once)'
            );
        }
        $reason = (string) $reason;
        $sets = array();
        $params = array();
        if ($p['retry_at_column'] !== null) {
            $sets[] = "{$p['retry_at_column']} = " . self::laterSql($p);
            $params[] = $p['driver'] === 'sqlite' && $p['modes']['retry_at'] !== 'epoch'
                ? "+$seconds seconds"
                : $seconds;
        }
        if ($p['attempts_column'] === null) {
            $this->end('retryLater', $p['retry_value'], $reason, $sets, $params);
            return $p['retry_value'];
        }
        $sets[] = "{$p['attempts_column']} = COALESCE({$p['attempts_column']}, 0) + 1";
        if ($p['max_attempts'] === null) {
            $this->end('retryLater', $p['retry_value'], $reason, $sets, $params);
            return $p['retry_value'];
        }
        // Attempts decide the status: read them under the guard, write on the value read.
        $what = 'retrying ' . $this->rowName();
        for ($try = 0; $try < 3; $try++) {
            $guardParams = array();
            $rows = self::query(
                $this->pdo,
                $what,
                "SELECT {$p['attempts_column']} FROM {$p['t']} WHERE " . $this->guard($guardParams),
                $guardParams
            );
            if (!$rows) {
                $this->lose('retryLater');
            }
            $attempts = $rows[0][0];
            $usedUp = $attempts !== null && (int) $attempts >= $p['max_attempts'];
            $status = $usedUp
                ? ($p['manual_value'] !== null ? $p['manual_value'] : $p['dead_value'])
                : $p['retry_value'];
            $message = $usedUp
                ? sprintf('retries used up (%d of %d): %s', (int) $attempts, $p['max_attempts'], $reason)
                : $reason;
            $cond = $attempts === null
                ? "{$p['attempts_column']} IS NULL"
                : "{$p['attempts_column']} = ?";
            $extra = $attempts === null ? array() : array($attempts);
            if ($this->end('retryLater', $status, $message, $sets, $params, $cond, $extra)) {
                return $status;
            }
        }
        throw new \RuntimeException(
            "Selfheal\\Lease: retrying {$this->rowName()}: its attempts kept changing while it "
            . 'was written; nothing was written'
        );
    }

    /**
     * Whether the row is still this worker's: one read under the guard (inside a
     * transaction on MySQL a locking read, so that the row stays this worker's until the
     * commit: guard the job's own last business write with it). False once finished or lost.
     *
     * @throws \RuntimeException the database failed
     */
    public function stillMine()
    {
        if ($this->state !== 'held' || $this->superseded()) {
            return false;
        }
        return $this->holds('reading ' . $this->rowName());
    }

    // ---- claims ------------------------------------------------------------------------

    private static function tryClaim(\PDO $pdo, array $p, $id)
    {
        $owner = Job::owner();
        $sets = array(
            "{$p['status_column']} = ?",
            "{$p['owner_column']} = ?",
            "{$p['started_column']} = " . self::nowSql($p, 'started'),
        );
        $params = array($p['running_value'], $owner);
        $assigned = array('started');
        if ($p['heartbeat_column'] !== null) {
            $sets[] = "{$p['heartbeat_column']} = " . self::nowSql($p, 'heartbeat');
            $assigned[] = 'heartbeat';
        }
        if ($p['ended_column'] !== null && $p['ended_nullable']) {
            $sets[] = "{$p['ended_column']} = NULL";
            $assigned[] = 'ended';
        }
        if ($p['message_column'] !== null) {
            $sets[] = "{$p['message_column']} = ?";
            $params[] = '';
        }
        $sets = array_merge($sets, self::kept($p, $assigned));
        $params[] = $id;
        $where = "{$p['id_column']} = ? AND " . self::claimable($p, $params);
        $sql = "UPDATE {$p['t']} SET " . implode(', ', $sets) . " WHERE $where";
        $what = 'claiming row ' . self::printable($id) . " of {$p['table']}";
        // The claim and the read of the start it wrote are one transaction: no one can take
        // the row in between, and a claim that matched more than one row is undone.
        self::call($pdo, $what, function () use ($pdo) {
            $pdo->beginTransaction();
        });
        try {
            $n = self::write($pdo, $what, $sql, $params);
            if ($n !== 1) {
                self::rollBack($pdo);
                if ($n > 1) {
                    throw new \RuntimeException(
                        "Selfheal\\Lease: $what matched $n rows: {$p['id_column_name']} is not "
                        . 'unique in this table; nothing was claimed'
                    );
                }
                return null;
            }
            $rows = self::query(
                $pdo,
                $what,
                "SELECT {$p['start_guard']}, {$p['started_column']} FROM {$p['t']} "
                . "WHERE {$p['id_column']} = ?",
                array($id)
            );
            if (!$rows || $rows[0][0] === null) {
                // CONVERT_TZ gives NULL for a zone the server cannot convert to: a fence on
                // a NULL start would match nothing, and every beat would find the lease lost.
                self::rollBack($pdo);
                throw new \RuntimeException(
                    "Selfheal\\Lease: $what: the database wrote no start time (NULL) into "
                    . "{$p['started_column_name']}; nothing was claimed. A DATETIME column is "
                    . "written in the server's global time zone unless 'timezone' is set: "
                    . "set 'timezone' to the zone selfheal reads it in ([database] timezone)"
                );
            }
            self::call($pdo, $what, function () use ($pdo) {
                $pdo->commit();
            });
        } catch (\Exception $e) {
            self::rollBack($pdo);
            throw $e;
        }
        return new Lease($pdo, $p, $id, $owner, $rows[0][0], (string) $rows[0][1]);
    }

    /** The ids of up to CANDIDATES claimable rows, oldest first. */
    private static function candidates(\PDO $pdo, array $p)
    {
        $params = array();
        $rows = self::query(
            $pdo,
            "reading claimable rows of {$p['table']}",
            "SELECT {$p['id_column']} FROM {$p['t']} WHERE " . self::claimable($p, $params)
            . " ORDER BY {$p['id_column']} LIMIT " . self::CANDIDATES,
            $params
        );
        $ids = array();
        foreach ($rows as $r) {
            $ids[] = $r[0];
        }
        return $ids;
    }

    /** The claimable condition: status, a due retry_at, the watch's match. */
    private static function claimable(array $p, array &$params)
    {
        $marks = array();
        foreach ($p['claimable_values'] as $v) {
            $marks[] = '?';
            $params[] = $v;
        }
        $cond = array("{$p['status_column']} IN (" . implode(', ', $marks) . ')');
        if ($p['retry_at_column'] !== null) {
            $cond[] = "({$p['retry_at_column']} IS NULL OR {$p['retry_at_column']} <= "
                . self::nowSql($p, 'retry_at') . ')';
        }
        foreach ($p['match'] as $m) {
            $cond[] = "{$m[0]} = ?";
            $params[] = $m[1];
        }
        return implode(' AND ', $cond);
    }

    private function __construct(\PDO $pdo, array $p, $id, $owner, $startGuard, $started)
    {
        $this->pdo = $pdo;
        $this->p = $p;
        $this->id = $id;
        $this->owner = $owner;
        $this->startGuard = $startGuard;
        $this->started = $started;
        // The guard cannot tell two claims of one row by one process within one second
        // apart (same owner, same start): the newer one supersedes the older here.
        $this->key = spl_object_hash($pdo) . "\0{$p['table']}\0$id\0$startGuard";
        $this->n = ++self::$claims;
        self::$newest[$this->key] = $this->n;
        $this->hrtime = function_exists('hrtime');
        $this->every = $this->hrtime ? (int) round($p['every'] * 1e9) : $p['every'] * 1e9;
        $this->nextBeat = $this->now() + $this->every;
        if ($p['heartbeat_file'] !== null) {
            // The file is touched by Selfheal\Job (its rules for files); this lease decides
            // when, so the job's own interval is kept below the lease's.
            $this->job = Job::start(array(
                'heartbeat' => str_replace('{id}', (string) $id, $p['heartbeat_file']),
                'every' => max(0.001, $p['every'] / 2),
            ));
        }
    }

    // ---- the guard ---------------------------------------------------------------------

    /** id + owner + start + status in (running_value, manual_value); appends the values. */
    private function guard(array &$params)
    {
        $p = $this->p;
        $params[] = $this->id;
        $params[] = $this->owner;
        $params[] = $this->startGuard;
        $params[] = $p['running_value'];
        $statuses = '?';
        if ($p['manual_value'] !== null) {
            $params[] = $p['manual_value'];
            $statuses .= ', ?';
        }
        return "{$p['id_column']} = ? AND {$p['owner_column']} = ? AND {$p['start_guard']} = ? "
            . "AND {$p['status_column']} IN ($statuses)";
    }

    /** One read under the guard (a locking read inside a MySQL transaction). */
    private function holds($what)
    {
        $p = $this->p;
        $params = array();
        $lock = $p['driver'] !== 'sqlite' && $this->pdo->inTransaction() ? ' FOR UPDATE' : '';
        $rows = self::query(
            $this->pdo,
            $what,
            "SELECT 1 FROM {$p['t']} WHERE " . $this->guard($params) . " LIMIT 1$lock",
            $params
        );
        return count($rows) > 0;
    }

    /**
     * The final write of finish() and retryLater(): status, end time, message and $sets
     * under the guard (and $cond). Returns true when written; false when $cond failed while
     * the guard still holds (the caller reads again); throws LeaseLost when the guard fails.
     */
    private function end($action, $status, $message, array $sets, array $setParams, $cond = null,
                         array $condParams = array())
    {
        $p = $this->p;
        array_unshift($sets, "{$p['status_column']} = ?");
        array_unshift($setParams, $status);
        $assigned = array();
        if ($p['ended_column'] !== null) {
            $sets[] = "{$p['ended_column']} = " . self::nowSql($p, 'ended');
            $assigned[] = 'ended';
        }
        if ($p['message_column'] !== null) {
            $sets[] = "{$p['message_column']} = ?";
            $setParams[] = self::cut((string) $message, $p['message_length']);
        }
        if ($action === 'retryLater' && $p['retry_at_column'] !== null) {
            $assigned[] = 'retry_at';
        }
        $sets = array_merge($sets, self::kept($p, $assigned));
        $params = $setParams;
        $where = $this->guard($params);
        if ($cond !== null) {
            $where .= " AND $cond";
            foreach ($condParams as $v) {
                $params[] = $v;
            }
        }
        $what = ($action === 'finish' ? 'finishing ' : 'retrying ') . $this->rowName();
        $n = self::write(
            $this->pdo,
            $what,
            "UPDATE {$p['t']} SET " . implode(', ', $sets) . " WHERE $where",
            $params
        );
        if ($n === 0) {
            $holds = $this->holds($what);
            if ($holds && $cond !== null) {
                return false;
            }
            // Only a status the guard admits (manual_value) can leave the row as it was; MySQL
            // then reports 0 for a row that matched, so the read decides.
            $stays = $status === $p['running_value'] || $status === $p['manual_value'];
            if (!($holds && $stays)) {
                $this->lose($action);
            }
        }
        $this->state = 'ended';
        $this->forget();
        return true;
    }

    /** Marks the lease lost and throws, naming what the row holds now. */
    private function lose($action)
    {
        if ($this->state !== 'lost') {
            $p = $this->p;
            $rows = self::query(
                $this->pdo,
                'reading ' . $this->rowName(),
                "SELECT {$p['status_column']}, {$p['owner_column']} FROM {$p['t']} "
                . "WHERE {$p['id_column']} = ?",
                array($this->id)
            );
            $this->lostAs = $rows ? array($rows[0][0], $rows[0][1]) : array(null, null);
            $this->state = 'lost';
            $this->forget();
        }
        throw new LeaseLost(
            $this->p['table'],
            $this->id,
            $this->owner,
            $this->started,
            $action,
            $this->lostAs[0],
            $this->lostAs[1]
        );
    }

    /**
     * A lost lease stays lost: every later call throws again and writes nothing (the row
     * cannot become this claim's again). A call on an ended lease is a misuse.
     */
    private function usable($action)
    {
        $this->notEnded($action);
        if ($this->state === 'lost' || $this->superseded()) {
            $this->lose($action);
        }
    }

    /** This process claimed the same row again, with the same start, since this lease. */
    private function superseded()
    {
        return !isset(self::$newest[$this->key]) || self::$newest[$this->key] !== $this->n;
    }

    private function forget()
    {
        if (isset(self::$newest[$this->key]) && self::$newest[$this->key] === $this->n) {
            unset(self::$newest[$this->key]);
        }
        $this->job = null;
    }

    private function notEnded($action)
    {
        if ($this->state === 'ended') {
            throw new \LogicException(
                "Selfheal\\Lease: $action() on " . $this->rowName() . ', whose lease already ended'
            );
        }
    }

    private function rowName()
    {
        return 'row ' . self::printable($this->id) . ' of ' . $this->p['table'];
    }

    /** Nanoseconds on a monotonic clock (hrtime, PHP 7.3+), else on the wall clock. */
    private function now()
    {
        return $this->hrtime ? hrtime(true) : microtime(true) * 1e9;
    }

    // ---- the specification -------------------------------------------------------------

    /** Validates $spec against the table and returns what the statements need. */
    private static function plan(\PDO $pdo, array $spec)
    {
        foreach (array_keys($spec) as $key) {
            if (!array_key_exists($key, self::$keys) && !in_array($key, self::$otherWatchKeys, true)) {
                throw new \InvalidArgumentException(
                    'Selfheal\\Lease: unknown key ' . self::shown($key) . self::nearest((string) $key)
                );
            }
        }
        $driver = $pdo->getAttribute(\PDO::ATTR_DRIVER_NAME);
        if ($driver !== 'mysql' && $driver !== 'pgsql' && $driver !== 'sqlite') {
            throw new \InvalidArgumentException(
                "Selfheal\\Lease: the connection's driver is '$driver'; mysql (MySQL, MariaDB), "
                . 'pgsql (PostgreSQL) and sqlite are supported'
            );
        }
        $p = array('driver' => $driver);
        $q = $driver === 'mysql' ? '`' : '"';

        $table = self::get($spec, 'table');
        if (!is_string($table) || !preg_match('/^[A-Za-z0-9_]{1,64}(\.[A-Za-z0-9_]{1,64})?\z/', $table)) {
            throw new \InvalidArgumentException(
                "Selfheal\\Lease: 'table' must be a table name or database.table (letters, "
                . 'digits and _), got ' . self::shown($table)
            );
        }
        $p['table'] = $table;
        $parts = explode('.', $table);
        $p['t'] = $q . implode("$q.$q", $parts) . $q;

        $columns = array(
            'id' => 'id_column', 'status' => 'status_column', 'started' => 'started_column',
            'owner' => 'owner_column', 'heartbeat' => 'heartbeat_column',
            'ended' => 'ended_column', 'message' => 'message_column',
            'retry_at' => 'retry_at_column', 'attempts' => 'attempts_column',
        );
        $names = array();
        foreach ($columns as $key) {
            $v = self::get($spec, $key);
            if ($v === null) {
                if ($key === 'started_column' || $key === 'owner_column') {
                    throw new \InvalidArgumentException(
                        "Selfheal\\Lease: '$key' is required"
                        . ($key === 'owner_column'
                            ? ' (the owner fences every write: a worker whose row was taken '
                              . 'away must not match it)'
                            : ' (the start fences every write)')
                    );
                }
                $names[$key] = null;
                continue;
            }
            $names[$key] = self::column($v, "'$key'");
        }
        $match = array();
        $rawMatch = self::get($spec, 'match');
        if ($rawMatch !== null) {
            if (!is_array($rawMatch) || !$rawMatch) {
                throw new \InvalidArgumentException(
                    "Selfheal\\Lease: 'match' must be an array of column => value"
                );
            }
            foreach ($rawMatch as $col => $value) {
                if (!is_string($value) && !is_int($value)) {
                    throw new \InvalidArgumentException(
                        "Selfheal\\Lease: 'match' value of " . self::printable($col)
                        . ' must be a string'
                    );
                }
                $match[] = array(self::column($col, "'match'"), (string) $value);
            }
        }

        $cols = self::columns($pdo, $p, $parts);
        $modes = array();
        foreach ($names as $key => $name) {
            if ($name === null) {
                continue;
            }
            if (!isset($cols[strtolower($name)])) {
                throw new \InvalidArgumentException(
                    "Selfheal\\Lease: table $table has no column $name ('$key')"
                );
            }
        }
        foreach ($match as $m) {
            if (!isset($cols[strtolower($m[0])])) {
                throw new \InvalidArgumentException(
                    "Selfheal\\Lease: table $table has no column {$m[0]} ('match')"
                );
            }
        }
        $timeKeys = array('started' => 'started_column', 'heartbeat' => 'heartbeat_column',
                          'ended' => 'ended_column', 'retry_at' => 'retry_at_column');
        foreach ($timeKeys as $short => $key) {
            if ($names[$key] !== null) {
                $modes[$short] = self::timeMode($driver, $cols[strtolower($names[$key])]['type'], $key, $names[$key]);
            }
        }
        foreach ($names as $key => $name) {
            $p[$key] = $name === null ? null : $q . $name . $q;
        }
        $p['id_column_name'] = $names['id_column'];
        $p['match'] = array();
        foreach ($match as $m) {
            $p['match'][] = array($q . $m[0] . $q, $m[1]);
        }
        $p['modes'] = $modes;
        $p['timezone'] = self::zone(self::get($spec, 'timezone'));
        $p['started_column_name'] = $names['started_column'];
        // Time columns declared ON UPDATE CURRENT_TIMESTAMP: kept by every write that does
        // not set them (kept()).
        $p['on_update'] = array();
        foreach ($timeKeys as $short => $key) {
            if ($names[$key] !== null && $cols[strtolower($names[$key])]['on_update']) {
                $p['on_update'][$short] = $p[$key];
            }
        }
        // An instant is compared as one, whatever the session's time zone writes it as.
        $p['start_guard'] = $modes['started'] === 'timestamp'
            ? ($driver === 'pgsql'
                ? "EXTRACT(EPOCH FROM {$p['started_column']})"
                : "UNIX_TIMESTAMP({$p['started_column']})")
            : $p['started_column'];
        $p['ended_nullable'] = $names['ended_column'] !== null
            && $cols[strtolower($names['ended_column'])]['null'];
        $p['message_length'] = $names['message_column'] !== null
            ? $cols[strtolower($names['message_column'])]['length']
            : null;

        foreach (array('running_value', 'manual_value', 'retry_value', 'dead_value') as $key) {
            $v = self::get($spec, $key);
            $p[$key] = $v === null ? null : self::statusValue($v, "'$key'");
        }
        $claimable = self::get($spec, 'claimable_values');
        if ($claimable === null) {
            $claimable = array('pending');
            if ($p['retry_value'] !== null && $p['retry_value'] !== 'pending') {
                $claimable[] = $p['retry_value'];
            }
        }
        if (!is_array($claimable) || !$claimable) {
            throw new \InvalidArgumentException(
                "Selfheal\\Lease: 'claimable_values' must be a non-empty array of statuses"
            );
        }
        $p['claimable_values'] = array();
        foreach ($claimable as $v) {
            $v = self::statusValue($v, "'claimable_values'");
            if ($v === $p['running_value'] || $v === $p['manual_value']) {
                throw new \InvalidArgumentException(
                    "Selfheal\\Lease: 'claimable_values' holds '$v', the status of a row that is "
                    . 'running or parked: such a row belongs to its worker'
                );
            }
            $p['claimable_values'][] = $v;
        }
        $max = self::get($spec, 'max_attempts');
        if ($max !== null && (!is_int($max) || $max < 1)) {
            throw new \InvalidArgumentException(
                "Selfheal\\Lease: 'max_attempts' must be a whole number of at least 1, got "
                . self::shown($max)
            );
        }
        if ($max !== null && $p['attempts_column'] === null) {
            throw new \InvalidArgumentException(
                "Selfheal\\Lease: 'max_attempts' needs 'attempts_column'"
            );
        }
        $p['max_attempts'] = $max;
        $every = self::get($spec, 'every');
        if (!is_int($every) && !is_float($every) && !(is_string($every) && is_numeric($every))) {
            throw new \InvalidArgumentException(
                "Selfheal\\Lease: 'every' must be a number of seconds, got " . self::shown($every)
            );
        }
        $every = (float) $every;
        // NAN compares false with every bound: it must be refused by name, or it passes.
        if (!is_finite($every) || $every < 0.001 || $every > 86400) {
            throw new \InvalidArgumentException(
                "Selfheal\\Lease: 'every' must be between 0.001 and 86400 seconds, got $every"
            );
        }
        $p['every'] = $every;
        $file = self::get($spec, 'heartbeat_file');
        if ($file !== null) {
            $rest = is_string($file) ? str_replace('{id}', '', $file) : '';
            if (!is_string($file) || $file === '' || $file[0] !== '/'
                || strpos($rest, '{') !== false || strpos($rest, '}') !== false
                || strpos($file, "\0") !== false) {
                throw new \InvalidArgumentException(
                    "Selfheal\\Lease: 'heartbeat_file' must be an absolute path with no "
                    . 'placeholder but {id}, got ' . self::shown($file)
                );
            }
        }
        $p['heartbeat_file'] = $file;
        return $p;
    }

    /** A key of the specification, or its default. */
    private static function get(array $spec, $key)
    {
        if (array_key_exists($key, $spec) && $spec[$key] !== null) {
            return $spec[$key];
        }
        return isset(self::$keys[$key]) ? self::$keys[$key] : null;
    }

    private static function column($v, $key)
    {
        if (!is_string($v) || !preg_match('/^[A-Za-z0-9_]{1,64}\z/', $v)) {
            throw new \InvalidArgumentException(
                "Selfheal\\Lease: $key must be a plain column name (letters, digits and _, at "
                . 'most 64), got ' . self::shown($v)
            );
        }
        return $v;
    }

    private static function statusValue($v, $what)
    {
        if (is_int($v)) {
            $v = (string) $v;
        }
        if (!is_string($v) || $v === '' || strlen($v) > 255) {
            throw new \InvalidArgumentException(
                "Selfheal\\Lease: $what must be a non-empty status of at most 255 characters, got "
                . self::shown($v)
            );
        }
        return $v;
    }

    /** A row id a claim may use: an int or a non-empty string, safe in heartbeat_file. */
    private static function checkId(array $p, $id)
    {
        if (!is_int($id) && !(is_string($id) && $id !== '')) {
            throw new \InvalidArgumentException(
                'Selfheal\\Lease: a row id must be an int or a non-empty string, got ' . self::shown($id)
            );
        }
        if ($p['heartbeat_file'] !== null && strpos($p['heartbeat_file'], '{id}') !== false
            && !preg_match('/^(?!\.)[A-Za-z0-9_.\-]{1,128}\z/', (string) $id)) {
            throw new \InvalidArgumentException(
                'Selfheal\\Lease: row id ' . self::shown($id) . " cannot be used in the "
                . "heartbeat_file template {$p['heartbeat_file']} (letters, digits, _, - and . "
                . 'not in first place)'
            );
        }
    }

    /** Claims need autocommit and no open transaction: a claim must be seen at once. */
    private static function checkConnection(\PDO $pdo, $what)
    {
        if ($pdo->inTransaction()) {
            throw new \LogicException(
                "Selfheal\\Lease::$what() inside an open transaction: the claim would stay "
                . 'invisible to other workers and to selfheal until the commit; claim first, '
                . 'then open the transaction'
            );
        }
        if ($pdo->getAttribute(\PDO::ATTR_DRIVER_NAME) === 'mysql') {
            $auto = self::call($pdo, 'reading the autocommit mode', function () use ($pdo) {
                return $pdo->getAttribute(\PDO::ATTR_AUTOCOMMIT);
            });
            if (!$auto) {
                throw new \LogicException(
                    "Selfheal\\Lease::$what(): the connection has autocommit off, so the claim "
                    . 'and its heartbeats would stay invisible until a commit; turn '
                    . 'PDO::ATTR_AUTOCOMMIT on'
                );
            }
        }
    }

    /**
     * The table's columns, read once per connection and table: lower-case name =>
     * ['type' => lower-case type, 'null' => nullable, 'length' => characters or null].
     */
    private static function columns(\PDO $pdo, array $p, array $parts)
    {
        $key = spl_object_hash($pdo) . '|' . $p['table'];
        if (isset(self::$columnCache[$key]) && self::$columnCache[$key][0] === $pdo) {
            return self::$columnCache[$key][1];
        }
        $what = "reading the columns of {$p['table']}";
        $cols = array();
        if ($p['driver'] === 'mysql') {
            $schema = count($parts) === 2 ? $parts[0] : null;
            $rows = self::query(
                $pdo,
                $what,
                'SELECT COLUMN_NAME, DATA_TYPE, IS_NULLABLE, CHARACTER_MAXIMUM_LENGTH, EXTRA '
                . 'FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) '
                . 'AND TABLE_NAME = ?',
                array($schema, end($parts))
            );
            foreach ($rows as $r) {
                $cols[strtolower($r[0])] = array(
                    'type' => strtolower($r[1]),
                    'null' => strtoupper($r[2]) === 'YES',
                    'length' => $r[3] === null ? null : (int) $r[3],
                    // MariaDB: "on update current_timestamp()"; MySQL 8: "DEFAULT_GENERATED
                    // on update CURRENT_TIMESTAMP".
                    'on_update' => stripos((string) $r[4], 'on update') !== false,
                );
            }
        } elseif ($p['driver'] === 'pgsql') {
            $schema = count($parts) === 2 ? $parts[0] : null;
            $rows = self::query(
                $pdo,
                $what,
                'SELECT column_name, data_type, is_nullable, character_maximum_length '
                . 'FROM information_schema.columns '
                . 'WHERE table_schema = COALESCE(CAST(? AS text), current_schema()) '
                . 'AND table_name = ?',
                array($schema, end($parts))
            );
            foreach ($rows as $r) {
                // PostgreSQL's names are case-sensitive once quoted: kept as the catalog has
                // them, looked up as the others are.
                $cols[strtolower($r[0])] = array(
                    'type' => strtolower($r[1]),
                    'null' => strtoupper($r[2]) === 'YES',
                    'length' => $r[3] === null ? null : (int) $r[3],
                    'on_update' => false,   // PostgreSQL has no ON UPDATE clause
                );
            }
        } else {
            $pragma = count($parts) === 2
                ? "PRAGMA \"{$parts[0]}\".table_info(\"{$parts[1]}\")"
                : "PRAGMA table_info(\"{$parts[0]}\")";
            foreach (self::query($pdo, $what, $pragma, array()) as $r) {
                // cid, name, type, notnull, dflt_value, pk
                $cols[strtolower($r[1])] = array(
                    'type' => strtolower((string) $r[2]),
                    'null' => !$r[3] && !$r[5],
                    'length' => null,   // SQLite does not enforce declared lengths
                    'on_update' => false,
                );
            }
        }
        if (!$cols) {
            throw new \InvalidArgumentException(
                "Selfheal\\Lease: there is no table {$p['table']} in this database (or this "
                . 'account may not see its columns)'
            );
        }
        self::$columnCache[$key] = array($pdo, $cols);
        if (count(self::$columnCache) > self::CACHED_TABLES) {
            array_shift(self::$columnCache);
        }
        return $cols;
    }

    /**
     * How a time column is written: 'naive' (DATETIME, text; PostgreSQL's timestamp),
     * 'text' (PostgreSQL's character types: written as YYYY-MM-DD HH:MM:SS), 'timestamp'
     * (MySQL TIMESTAMP, PostgreSQL timestamptz: compared by its instant) or 'epoch'
     * (integer unix seconds). A floating-point or
     * decimal column is refused: a FLOAT holds a unix time to the nearest 128 s or so (a
     * lease stored minutes ahead is lost at its first beat), and the guard of every write
     * compares the value exactly.
     */
    private static function timeMode($driver, $type, $key, $name)
    {
        if ($driver === 'sqlite') {
            // SQLite's type affinity: INT anywhere in the name is an integer column; REAL,
            // FLOA and DOUB make a floating-point one.
            if (strpos($type, 'int') !== false) {
                return 'epoch';
            }
            foreach (array('real', 'floa', 'doub') as $float) {
                if (strpos($type, $float) !== false) {
                    throw self::notATimeColumn($name, $key, $type);
                }
            }
            return 'naive';
        }
        if ($driver === 'pgsql') {
            if ($type === 'timestamp with time zone') {
                return 'timestamp';
            }
            if ($type === 'timestamp without time zone') {
                return 'naive';
            }
            if (in_array($type, array('character varying', 'character', 'text'), true)) {
                return 'text';
            }
            if (in_array($type, array('integer', 'bigint', 'smallint'), true)) {
                return 'epoch';
            }
            throw self::notATimeColumn($name, $key, $type);
        }
        if ($type === 'timestamp') {
            return 'timestamp';
        }
        if (in_array($type, array('datetime', 'char', 'varchar'), true)) {
            return 'naive';
        }
        if (in_array($type, array('int', 'integer', 'bigint', 'mediumint', 'smallint'), true)) {
            return 'epoch';
        }
        throw self::notATimeColumn($name, $key, $type);
    }

    private static function notATimeColumn($name, $key, $type)
    {
        return new \InvalidArgumentException(
            "Selfheal\\Lease: column $name ('$key') is " . strtoupper($type) . '; expected '
            . 'DATETIME, TIMESTAMP or an integer of unix seconds (a floating-point or decimal '
            . 'column cannot hold the exact time every write is fenced by)'
        );
    }

    /**
     * The database's now for time column $short ('started', 'heartbeat', 'ended',
     * 'retry_at'), as selfheal reads that column, whatever the session's time_zone: unix
     * seconds; a MySQL TIMESTAMP's NOW() (stored as UTC, so zone-free); a naive DATETIME
     * (or text) as the database's UTC time converted to 'timezone' (its offset now), else
     * to the server's global zone (MySQL) or kept as UTC (SQLite). Built for each statement:
     * a lease may outlive a change to or from daylight saving time.
     */
    private static function nowSql(array $p, $short)
    {
        $mode = $p['modes'][$short];
        if ($p['driver'] === 'pgsql') {
            return self::pgNow($p, $mode, '');
        }
        if ($p['driver'] === 'mysql') {
            if ($mode === 'epoch') {
                return 'UNIX_TIMESTAMP()';
            }
            if ($mode === 'timestamp') {
                return 'NOW()';
            }
            if ($p['timezone'] === null) {
                return "CONVERT_TZ(UTC_TIMESTAMP(), '+00:00', @@global.time_zone)";
            }
            return 'UTC_TIMESTAMP() + INTERVAL ' . self::offset($p['timezone']) . ' SECOND';
        }
        if ($mode === 'epoch') {
            return "CAST(strftime('%s', 'now') AS INTEGER)";
        }
        return "strftime('%Y-%m-%d %H:%M:%S', 'now'" . self::shift($p) . ')';
    }

    /**
     * PostgreSQL's now for a column written in $mode, $plus added to the instant first (''
     * or ' + ? * INTERVAL ...'): to the second, as MySQL's NOW() is.
     */
    private static function pgNow(array $p, $mode, $plus)
    {
        $now = "(date_trunc('second', CURRENT_TIMESTAMP)$plus)";
        if ($mode === 'epoch') {
            return $plus === ''
                ? 'FLOOR(EXTRACT(EPOCH FROM CURRENT_TIMESTAMP))::bigint'
                : "FLOOR(EXTRACT(EPOCH FROM $now))::bigint";
        }
        if ($mode === 'timestamp') {
            return $now;
        }
        // A naive time: the instant as a wall-clock time of 'timezone' (its offset now), else
        // of the server's TimeZone as a session that sets none has it (reset_val: whatever
        // this session set with SET TIME ZONE).
        $naive = $p['timezone'] === null
            ? "($now AT TIME ZONE (SELECT reset_val FROM pg_settings WHERE name = 'TimeZone'))"
            : "($now AT TIME ZONE 'UTC' + INTERVAL '" . self::offset($p['timezone']) . " seconds')";
        return $mode === 'text' ? "to_char($naive, 'YYYY-MM-DD HH24:MI:SS')" : $naive;
    }

    /** nowSql() of retry_at plus a bound number of seconds (SQLite text: '+N seconds'). */
    private static function laterSql(array $p)
    {
        $mode = $p['modes']['retry_at'];
        if ($p['driver'] === 'pgsql') {
            return self::pgNow($p, $mode, " + CAST(? AS integer) * INTERVAL '1 second'");
        }
        if ($p['driver'] === 'mysql') {
            return $mode === 'epoch'
                ? 'UNIX_TIMESTAMP() + ?'
                : self::nowSql($p, 'retry_at') . ' + INTERVAL ? SECOND';
        }
        return $mode === 'epoch'
            ? "CAST(strftime('%s', 'now') AS INTEGER) + ?"
            : "strftime('%Y-%m-%d %H:%M:%S', 'now'" . self::shift($p) . ', ?)';
    }

    /** SQLite's modifier that shifts UTC to 'timezone' (its offset now), or ''. */
    private static function shift(array $p)
    {
        if ($p['timezone'] === null) {
            return '';
        }
        return sprintf(", '%+d seconds'", self::offset($p['timezone']));
    }

    /**
     * 'timezone' validated: null, or [name, fixed offset in seconds or null, \DateTimeZone
     * or null]. A zone name as selfheal's [database] timezone takes it (the tz database's,
     * old names included), or a fixed offset ±HH:MM as MySQL's time_zone takes it. The
     * offset of a named zone is computed here, never by the server's CONVERT_TZ, which
     * gives NULL for every named zone unless the server's time zone tables are loaded.
     */
    private static function zone($tz)
    {
        if ($tz === null) {
            return null;
        }
        if (is_string($tz) && preg_match('/^([+-])(\d\d):([0-5]\d)\z/', $tz, $m)
            && (int) $m[2] * 60 + (int) $m[3] <= 14 * 60) {
            $seconds = ((int) $m[2] * 3600 + (int) $m[3] * 60) * ($m[1] === '-' ? -1 : 1);
            return array($tz, $seconds, null);
        }
        if (self::$zoneNames === null) {
            self::$zoneNames = array_flip(
                \DateTimeZone::listIdentifiers(\DateTimeZone::ALL_WITH_BC)
            );
        }
        if (is_string($tz) && isset(self::$zoneNames[$tz])) {
            return array($tz, null, new \DateTimeZone($tz));
        }
        throw new \InvalidArgumentException(
            "Selfheal\\Lease: 'timezone' must be a time zone name (as selfheal's [database] "
            . "timezone, e.g. 'Europe/Berlin') or an offset from UTC as +HH:MM or -HH:MM (at "
            . 'most 14:00), got ' . self::shown($tz)
        );
    }

    /** Seconds 'timezone' is ahead of UTC now. */
    private static function offset(array $zone)
    {
        if ($zone[2] === null) {
            return $zone[1];
        }
        $now = new \DateTime('now', $zone[2]);
        return $now->getOffset();
    }

    /**
     * `col = col` for each time column declared ON UPDATE CURRENT_TIMESTAMP that the
     * statement does not set ($assigned: short names): such a column moves to now on any
     * UPDATE that does not assign it, which would move the start the guard compares.
     */
    private static function kept(array $p, array $assigned)
    {
        $setCols = array();
        foreach ($assigned as $short) {
            $setCols[] = $p[$short . '_column'];
        }
        $sets = array();
        foreach ($p['on_update'] as $col) {
            if (!in_array($col, $setCols, true)) {
                $sets[] = "$col = $col";
                $setCols[] = $col;
            }
        }
        return $sets;
    }

    // ---- the database ------------------------------------------------------------------

    /**
     * Runs $f with the connection in exception mode (restored afterwards); a PDOException
     * becomes a \RuntimeException that says what failed.
     */
    private static function call(\PDO $pdo, $what, $f)
    {
        $mode = $pdo->getAttribute(\PDO::ATTR_ERRMODE);
        if ($mode !== \PDO::ERRMODE_EXCEPTION) {
            $pdo->setAttribute(\PDO::ATTR_ERRMODE, \PDO::ERRMODE_EXCEPTION);
        }
        try {
            return $f();
        } catch (\PDOException $e) {
            throw new \RuntimeException("Selfheal\\Lease: $what failed: " . $e->getMessage(), 0, $e);
        } finally {
            if ($mode !== \PDO::ERRMODE_EXCEPTION) {
                $pdo->setAttribute(\PDO::ATTR_ERRMODE, $mode);
            }
        }
    }

    private static function run(\PDO $pdo, $sql, array $params)
    {
        $st = $pdo->prepare($sql);
        $i = 1;
        foreach ($params as $v) {
            $type = is_int($v) ? \PDO::PARAM_INT : ($v === null ? \PDO::PARAM_NULL : \PDO::PARAM_STR);
            $st->bindValue($i++, $v, $type);
        }
        $st->execute();
        return $st;
    }

    /** Rows (numeric arrays) of a SELECT. */
    private static function query(\PDO $pdo, $what, $sql, array $params)
    {
        return self::call($pdo, $what, function () use ($pdo, $sql, $params) {
            $st = self::run($pdo, $sql, $params);
            $rows = $st->fetchAll(\PDO::FETCH_NUM);
            $st->closeCursor();
            return $rows;
        });
    }

    /** Rows an UPDATE changed (MySQL: changed, not matched). */
    private static function write(\PDO $pdo, $what, $sql, array $params)
    {
        return self::call($pdo, $what, function () use ($pdo, $sql, $params) {
            return self::run($pdo, $sql, $params)->rowCount();
        });
    }

    private static function rollBack(\PDO $pdo)
    {
        try {
            if ($pdo->inTransaction()) {
                $pdo->rollBack();
            }
        } catch (\Exception $e) {
            // The connection is gone: so is the transaction.
        }
    }

    /** $message cut to $length characters (UTF-8), as strict SQL modes refuse longer values. */
    private static function cut($message, $length)
    {
        if ($length === null || strlen($message) <= $length) {
            return $message;
        }
        if ($length <= 65535 && preg_match('/^.{0,' . $length . '}/su', $message, $m)) {
            return $m[0];
        }
        return substr($message, 0, $length);
    }

    private static function nearest($key)
    {
        $best = null;
        $dist = 4;
        foreach (array_merge(array_keys(self::$keys), self::$otherWatchKeys) as $known) {
            $d = levenshtein($key, $known);
            if ($d < $dist) {
                $best = $known;
                $dist = $d;
            }
        }
        return $best === null ? '' : " (did you mean '$best'?)";
    }

    /** A value for a message: control characters escaped, long values cut. */
    private static function printable($v)
    {
        $s = (string) $v;
        if (strlen($s) > 200) {
            $s = substr($s, 0, 200) . '...';
        }
        return addcslashes($s, "\0..\37\177\\");
    }

    private static function shown($v)
    {
        if (is_string($v)) {
            return "'" . self::printable($v) . "'";
        }
        if (is_int($v) || is_float($v)) {
            return (string) $v;
        }
        return gettype($v);
    }
}
