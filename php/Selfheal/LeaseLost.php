<?php
/*
 * Selfheal\LeaseLost: thrown by Selfheal\Lease when the row a worker claimed is no longer
 * its own — selfheal reclaimed it (the worker looked dead: stopped, its heartbeat silent),
 * a person resolved it, another tool changed its status, or a successor claimed it again.
 * The worker must stop working on that row at once and must not write its result: what
 * the row holds now was written by someone who came after it. Let the job end non-zero
 * (exit($e->getCode()), 75 as for a lock not obtained: this run did not finish its work).
 *
 * PHP 7.0 or newer. Part of selfheal; installed in /usr/share/selfheal/php/.
 */

namespace Selfheal;

class LeaseLost extends \RuntimeException
{
    /** The exit status for a job that lost its row (EX_TEMPFAIL), as for a lock not obtained. */
    const EXIT_STATUS = 75;

    /** @var string */
    private $table;

    /** @var string */
    private $id;

    /** @var string */
    private $owner;

    /** @var string */
    private $started;

    /** @var string */
    private $action;

    /** @var string|null */
    private $statusNow;

    /** @var string|null */
    private $ownerNow;

    /**
     * @param string      $table     the job table
     * @param string      $id        the row's id
     * @param string      $owner     the owner this worker claimed it as ("HOST:PID")
     * @param string      $started   the start value this worker's claim wrote
     * @param string      $action    what the worker tried: "beat", "finish", "retryLater"
     * @param string|null $statusNow the row's status now, or null when the row is gone
     * @param string|null $ownerNow  the row's owner now (null: gone, or empty)
     */
    public function __construct($table, $id, $owner, $started, $action, $statusNow, $ownerNow)
    {
        $this->table = (string) $table;
        $this->id = (string) $id;
        $this->owner = (string) $owner;
        $this->started = (string) $started;
        $this->action = (string) $action;
        $this->statusNow = $statusNow === null ? null : (string) $statusNow;
        $this->ownerNow = $ownerNow === null ? null : (string) $ownerNow;
        if ($this->statusNow === null) {
            $now = 'the row is gone';
        } else {
            $now = "it is now '" . self::printable($this->statusNow) . "'";
            if ($this->ownerNow !== null && $this->ownerNow !== $this->owner) {
                $now .= " (owner '" . self::printable($this->ownerNow) . "')";
            }
        }
        parent::__construct(
            sprintf(
                "Selfheal\\LeaseLost: row %s of %s is no longer this worker's (claimed as %s at %s): "
                . '%s; %s refused: stop working on it, its result must not be written',
                self::printable($this->id),
                $this->table,
                self::printable($this->owner),
                self::printable($this->started),
                $now,
                $this->action
            ),
            self::EXIT_STATUS
        );
    }

    /** The job table. */
    public function table()
    {
        return $this->table;
    }

    /** The row's id. */
    public function id()
    {
        return $this->id;
    }

    /** The owner this worker claimed the row as ("HOST:PID"). */
    public function owner()
    {
        return $this->owner;
    }

    /** What the worker tried when the loss was found: "beat", "finish", "retryLater". */
    public function action()
    {
        return $this->action;
    }

    /** The row's status when the loss was found, or null when the row is gone. */
    public function statusNow()
    {
        return $this->statusNow;
    }

    /** The row's owner when the loss was found (null: the row is gone or has none). */
    public function ownerNow()
    {
        return $this->ownerNow;
    }

    /** A value from the database, with control characters escaped: one line in any log. */
    private static function printable($s)
    {
        $s = (string) $s;
        if (strlen($s) > 200) {
            $s = substr($s, 0, 200) . '...';
        }
        return addcslashes($s, "\0..\37\177\\");
    }
}
