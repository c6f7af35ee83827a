<?php
/*
 * Selfheal\Job: what a PHP job needs to leave the evidence selfheal judges it by, in a few
 * lines (selfheal(1), section RUN; the same three things `selfheal run` gives a job it
 * wraps):
 *
 *   - a kernel lock (flock) on the job's lock file, waited for at most `wait` seconds on a
 *     monotonic clock, never deleted and never recreated (two processes locking two inodes
 *     do not exclude each other), with "HOST:PID START" written into the file in place
 *     once held — the line `selfheal run` writes, read back by a refused run and by
 *     `selfheal doctor`;
 *   - beat(): touches the heartbeat file at most once per `every` seconds, cheap enough to
 *     call on every iteration of the job's loop (one clock read and a comparison when it
 *     is not due);
 *   - Job::owner(): "HOST:PID", the value for the row's owner column.
 *
 * When the lock is not obtained in time, Selfheal\LockNotObtained is thrown (code 75):
 * the job must end non-zero, never with exit 0.
 *
 *   require '/usr/share/selfheal/php/Selfheal/Job.php';
 *   try {
 *       $job = Selfheal\Job::start([
 *           'lock'      => '/var/www/app/runtime/sync.lock',
 *           'wait'      => 180,                              // seconds; 0: one try
 *           'heartbeat' => '/var/www/app/runtime/sync.heartbeat',
 *           'every'     => 10,                               // seconds between touches
 *       ]);
 *   } catch (Selfheal\LockNotObtained $e) {
 *       fwrite(STDERR, $e->getMessage() . "\n");
 *       exit($e->getCode());                                 // 75
 *   }
 *   ... INSERT … (status, start_time, worker) VALUES ('running', NOW(), Selfheal\Job::owner())
 *   foreach ($items as $item) { work($item); $job->beat(); }
 *   $job->release();                                          // or let the process end
 *
 * Files: the lock file is opened read-write and created (then made 0644) if missing; a
 * lock file this user cannot write is opened read-only, locked all the same, and gets no
 * holder line. A symbolic link at the lock or heartbeat path, or anything but a regular
 * file, is refused (the job runs as its own user, typically www-data; selfheal itself
 * applies the stricter rules of a process that may run as root). The lock is released
 * when the process ends, however it ends — also by a crash or `kill -9` — and by release().
 * Do not wrap a job in `selfheal run --lock F` and lock the same F here: the two would
 * exclude each other.
 *
 * PHP 7.0 or newer, no extension beyond the core. Without Composer: require this file
 * (it loads LockNotObtained.php beside it). With Composer, add the directory to the
 * classmap: "autoload": {"classmap": ["/usr/share/selfheal/php/"]}.
 * Part of selfheal; installed in /usr/share/selfheal/php/.
 */

namespace Selfheal;

require_once __DIR__ . '/LockNotObtained.php';

class Job
{
    /** @var resource|null the locked lock file */
    private $lock = null;

    /** @var string|null */
    private $lockFile = null;

    /** @var string|null */
    private $heartbeatFile = null;

    /** @var int|float nanoseconds between two touches */
    private $every = 10000000000;

    /** @var int|float when beat() next touches, on the clock of now() */
    private $nextBeat = PHP_INT_MAX;

    /** @var bool hrtime() exists (PHP 7.3+): a monotonic clock */
    private $hrtime;

    /** @var bool a failed touch was already reported */
    private $warned = false;

    /**
     * Takes the lock (if 'lock' is given) and touches the heartbeat (if 'heartbeat' is).
     *
     * Options: 'lock' (path), 'wait' (seconds, default 0: one try), 'heartbeat' (path),
     * 'every' (seconds, default 10).
     *
     * @throws LockNotObtained          the lock was held longer than 'wait'
     * @throws \InvalidArgumentException an unknown option or a bad value
     * @throws \RuntimeException        the lock file cannot be opened or locked
     */
    public static function start(array $options): Job
    {
        return new Job($options);
    }

    /** See start(). */
    public function __construct(array $options = array())
    {
        $known = array('lock', 'wait', 'heartbeat', 'every');
        foreach (array_keys($options) as $key) {
            if (!in_array($key, $known, true)) {
                throw new \InvalidArgumentException(
                    "Selfheal\\Job: unknown option '$key' (known: " . implode(', ', $known) . ')'
                );
            }
        }
        $wait = self::seconds($options, 'wait', 0, 0.0);
        $every = self::seconds($options, 'every', 10, 0.001);
        $this->hrtime = function_exists('hrtime');
        $this->every = $this->hrtime ? (int) round($every * 1e9) : $every * 1e9;
        if (isset($options['lock'])) {
            $this->acquire((string) $options['lock'], $wait);
        }
        if (isset($options['heartbeat'])) {
            $this->heartbeatFile = (string) $options['heartbeat'];
            $this->nextBeat = 0;
            $this->beat();
        }
    }

    /** "HOST:PID" of this process: the value for the row's owner column. */
    public static function owner(): string
    {
        return gethostname() . ':' . getmypid();
    }

    /**
     * Touches the heartbeat file if the last touch is at least 'every' seconds ago.
     * Returns whether it touched. Call it as often as you like.
     */
    public function beat(): bool
    {
        $now = $this->hrtime ? hrtime(true) : microtime(true) * 1e9;
        if ($now < $this->nextBeat) {
            return false;
        }
        $this->nextBeat = $now + $this->every;
        $file = $this->heartbeatFile;
        if (is_link($file)) {
            $this->warnOnce("$file is a symbolic link: not touched");
            return false;
        }
        if (!@touch($file)) {
            $e = error_get_last();
            $this->warnOnce("$file not touched: " . ($e ? $e['message'] : 'touch failed'));
            return false;
        }
        $this->warned = false;
        return true;
    }

    /** Releases the lock (the file stays, with the last holder's line). Idempotent. */
    public function release()
    {
        if ($this->lock !== null) {
            flock($this->lock, LOCK_UN);
            fclose($this->lock);
            $this->lock = null;
        }
    }

    public function __destruct()
    {
        $this->release();
    }

    /** The lock file, or null. */
    public function lockFile()
    {
        return $this->lockFile;
    }

    /** The "HOST:PID START" line written into the lock file, or null. */
    public static function holderLine()
    {
        return self::owner() . ' ' . gmdate('Y-m-d\TH:i:s\Z') . "\n";
    }

    private function acquire($path, $wait)
    {
        if (is_link($path)) {
            throw new \RuntimeException("Selfheal\\Job: $path is a symbolic link; refused");
        }
        $created = !file_exists($path);
        $writable = true;
        $fh = @fopen($path, 'c+');   // created if missing, never truncated
        if ($fh === false) {
            $writable = false;
            $fh = @fopen($path, 'r');
        }
        if ($fh === false) {
            $e = error_get_last();
            throw new \RuntimeException(
                "Selfheal\\Job: cannot open $path: " . ($e ? $e['message'] : 'fopen failed')
            );
        }
        $st = fstat($fh);
        if ($st === false || ($st['mode'] & 0170000) !== 0100000) {
            fclose($fh);
            throw new \RuntimeException("Selfheal\\Job: $path is not a regular file; refused");
        }
        if ($created && $writable) {
            @chmod($path, 0644);
        }
        $start = $this->now();
        $deadline = $start + $wait * 1e9;
        $pause = 10000;   // microseconds, doubling up to 100 ms
        while (true) {
            $wouldBlock = 0;
            if (flock($fh, LOCK_EX | LOCK_NB, $wouldBlock)) {
                break;
            }
            if (!$wouldBlock) {
                fclose($fh);
                throw new \RuntimeException("Selfheal\\Job: cannot lock $path");
            }
            $now = $this->now();
            if ($now >= $deadline) {
                $content = (string) stream_get_contents($fh, 512, 0);
                fclose($fh);
                $lines = explode("\n", $content);
                throw new LockNotObtained($path, trim($lines[0]), ($now - $start) / 1e9);
            }
            usleep((int) max(1, min($pause, ($deadline - $now) / 1000)));
            $pause = min($pause * 2, 100000);
        }
        if ($writable) {
            // In place: the line at offset 0, then the file cut to its length.
            $line = self::holderLine();
            rewind($fh);
            fwrite($fh, $line);
            fflush($fh);
            ftruncate($fh, strlen($line));
        }
        $this->lock = $fh;
        $this->lockFile = $path;
    }

    /** Nanoseconds on a monotonic clock (hrtime), else on the wall clock. */
    private function now()
    {
        return $this->hrtime ? hrtime(true) : microtime(true) * 1e9;
    }

    private static function seconds(array $options, $key, $default, $min)
    {
        if (!isset($options[$key])) {
            return (float) $default;
        }
        $v = $options[$key];
        if (!is_int($v) && !is_float($v) && !(is_string($v) && is_numeric($v))) {
            throw new \InvalidArgumentException("Selfheal\\Job: '$key' must be a number of seconds");
        }
        $v = (float) $v;
        if ($v < $min) {
            throw new \InvalidArgumentException("Selfheal\\Job: '$key' must be at least $min seconds");
        }
        return $v;
    }

    private function warnOnce($message)
    {
        if (!$this->warned) {
            $this->warned = true;
            trigger_error("Selfheal\\Job: heartbeat: $message", E_USER_WARNING);
        }
    }
}
