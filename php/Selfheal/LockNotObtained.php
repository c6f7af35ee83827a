<?php
/*
 * Selfheal\LockNotObtained: thrown by Selfheal\Job when another process holds the job's
 * lock for longer than the job agreed to wait. The job did nothing: let it end with a
 * non-zero status (exit($e->getCode()), i.e. 75, as `selfheal run` does), never with 0 —
 * a run that was skipped must not look like a run that succeeded.
 *
 * PHP 7.0 or newer. Part of selfheal; installed in /usr/share/selfheal/php/.
 */

namespace Selfheal;

class LockNotObtained extends \RuntimeException
{
    /** The exit status for a run that did not get its lock (EX_TEMPFAIL), as selfheal run's. */
    const EXIT_STATUS = 75;

    /** @var string */
    private $lockFile;

    /** @var string */
    private $holder;

    /** @var float */
    private $waited;

    /**
     * @param string $lockFile the lock file
     * @param string $holder   its first line: "HOST:PID START" of the holder, or '' if none
     * @param float  $waited   seconds waited
     */
    public function __construct($lockFile, $holder, $waited)
    {
        $this->lockFile = (string) $lockFile;
        $this->holder = (string) $holder;
        $this->waited = (float) $waited;
        $who = $this->holder === ''
            ? 'a process that wrote no holder line'
            : $this->holder . ' (HOST:PID START)';
        $how = $this->waited > 0
            ? sprintf('gave up after waiting %.1fs', $this->waited)
            : 'one try (wait 0)';
        parent::__construct(
            sprintf('not started: %s is held by %s; %s', $this->lockFile, $who, $how),
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
}
