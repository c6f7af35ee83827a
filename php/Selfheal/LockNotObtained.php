<?php
/*
 * Selfheal\LockNotObtained: thrown by Selfheal\Job when another process holds the job's
 * lock for longer than the job agreed to wait. The job did nothing: let it end with a
 * non-zero status (exit($e->getCode()), i.e. 75, as `selfheal run` does), never with 0 —
 * a run that was skipped must not look like a run that succeeded.
 *
 * The message reads like `selfheal run`'s refusal:
 *   not started: /var/www/app/runtime/sync.lock is held by web1:4242 since
 *   2026-03-14T15:09:26Z (3m ago); gave up after waiting 2m
 *
 * PHP 7.0 or newer. Part of selfheal; installed in /usr/share/selfheal/php/.
 */

namespace Selfheal;

class LockNotObtained extends \RuntimeException
{
    /** The exit status for a run that did not get its lock (EX_TEMPFAIL), as selfheal run's. */
    const EXIT_STATUS = 75;

    /** At most this many characters of a holder's host are printed. */
    const MAX_HOST_SHOWN = 64;

    /** @var string */
    private $lockFile;

    /** @var string */
    private $holder;

    /** @var float */
    private $waited;

    /**
     * @param string      $lockFile the lock file
     * @param string      $holder   its first line: "HOST:PID START" of the holder, or '' if none
     * @param float       $waited   seconds waited
     * @param string|null $who      who holds it, in words (Selfheal\Job says whether the
     *                              process still runs, or names a shared lock); null: from
     *                              $holder alone
     */
    public function __construct($lockFile, $holder, $waited, $who = null)
    {
        $this->lockFile = (string) $lockFile;
        $this->holder = (string) $holder;
        $this->waited = (float) $waited;
        if ($who === null) {
            $line = self::parseLine($this->holder);
            if ($line !== null) {
                $who = self::since($line, time());
            } elseif ($this->holder === '') {
                $who = 'a process that wrote no holder line';
            } else {
                $who = 'a process: the file names no holder (' . self::printable($this->holder, 64) . ')';
            }
        }
        parent::__construct(
            sprintf('not started: %s is held by %s; %s', $this->lockFile, $who, self::how($this->waited)),
            self::EXIT_STATUS
        );
    }

    /** The lock file. */
    public function lockFile()
    {
        return $this->lockFile;
    }

    /** The holder line found in the lock file ("HOST:PID START"), or '' when there was none. */
    public function holder()
    {
        return $this->holder;
    }

    /** Seconds waited for the lock. */
    public function waited()
    {
        return $this->waited;
    }

    /**
     * Parses the first line of a lock file as "HOST:PID START" (what `selfheal run` and
     * Selfheal\Job write): array('host', 'pid', 'since' (unix seconds), 'start' (as
     * written)), or null for anything else (an empty file, a bare pid, garbage).
     */
    public static function parseLine($text)
    {
        $first = explode("\n", (string) $text, 2);
        $line = trim($first[0]);
        if (!preg_match('/^([^\s:]+):([0-9]{1,10})\s+(\S+)$/', $line, $m)
            || preg_match('/[\x00-\x1f\x7f]/', $m[1])) {
            return null;
        }
        $pid = (int) $m[2];
        if ($pid < 1 || $pid > 2147483647) {
            return null;
        }
        $t = '/^([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]+)?'
            . '(?:[Zz]|([+-])([0-9]{2}):([0-9]{2}))$/';
        if (!preg_match($t, $m[3], $d)
            || !checkdate((int) $d[2], (int) $d[3], (int) $d[1])
            || (int) $d[4] > 23 || (int) $d[5] > 59 || (int) $d[6] > 60) {
            return null;
        }
        $since = gmmktime((int) $d[4], (int) $d[5], (int) $d[6], (int) $d[2], (int) $d[3], (int) $d[1]);
        if (isset($d[8]) && $d[8] !== '') {
            $offset = ((int) $d[9] * 60 + (int) $d[10]) * 60;
            $since -= $d[8] === '+' ? $offset : -$offset;
        }
        return array('host' => $m[1], 'pid' => $pid, 'since' => $since, 'start' => $m[3]);
    }

    /** "web1:4242 since 2026-03-14T15:09:26Z (3m ago)" for a parsed line, at $now. */
    public static function since(array $line, $now)
    {
        $host = self::printable($line['host'], self::MAX_HOST_SHOWN);
        $text = $host . ':' . $line['pid'] . ' since ' . gmdate('Y-m-d\TH:i:s\Z', $line['since']);
        $age = $now - $line['since'];
        return $age >= 0 ? $text . ' (' . self::human($age) . ' ago)' : $text;
    }

    /**
     * $text with every byte outside printable ASCII written as \xNN (it comes from a file
     * another user may write), cut to $max characters ('…' where cut).
     */
    public static function printable($text, $max)
    {
        $out = '';
        $n = 0;
        $len = strlen($text);
        for ($i = 0; $i < $len; $i++) {
            if ($n >= $max) {
                return $out . '…';
            }
            $c = $text[$i];
            $o = ord($c);
            $out .= ($o >= 0x20 && $o < 0x7f && $c !== '\\') ? $c : sprintf('\\x%02x', $o);
            $n++;
        }
        return $out;
    }

    /** "3s", "2m", "2m30s", "5h12m", "3d4h": as selfheal prints an age. */
    private static function human($secs)
    {
        $secs = (int) $secs;
        $h = intdiv($secs, 3600);
        $m = intdiv($secs % 3600, 60);
        $s = $secs % 60;
        if ($h === 0 && $m === 0) {
            return "{$s}s";
        }
        if ($h === 0) {
            return $s === 0 ? "{$m}m" : "{$m}m{$s}s";
        }
        if ($h >= 48) {
            return intdiv($h, 24) . 'd' . ($h % 24) . 'h';
        }
        return "{$h}h{$m}m";
    }

    /** "one try (wait 0)", or "gave up after waiting 2m" (250ms below a second). */
    private static function how($waited)
    {
        if ($waited <= 0) {
            return 'one try (wait 0)';
        }
        if ($waited < 1) {
            return 'gave up after waiting ' . max(1, (int) round($waited * 1000)) . 'ms';
        }
        return 'gave up after waiting ' . self::human((int) floor($waited));
    }
}
