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
 * the job must end non-zero, never with exit 0. Its message reads like `selfheal run`'s:
 * "not started: FILE is held by web1:4242 since 2026-03-14T15:09:26Z (3m ago); one try
 * (wait 0)".
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
 * The lock file: created (mode 0644, less the umask) if missing. A file that is empty or
 * already holds a holder line is opened read-write and gets the line; any other file — the
 * script itself (`'lock' => __FILE__`), a data file — is opened read-only and locked as it
 * is: its bytes and its mode are left alone, and it gets no line (docs/design.md#run-wrapper, as `selfheal
 * run --lock`). A lock file this user cannot write is locked read-only too. The lock is
 * released when the process ends, however it ends — also by a crash or `kill -9` — and by
 * release(). Do not wrap a job in `selfheal run --lock F` and lock the same F here: the two
 * would exclude each other.
 *
 * Files, as a job running as root from /etc/cron.d sees them, in directories a less trusted
 * user (www-data) can write (selfheal(1), section SECURITY). PHP has no O_NOFOLLOW (and its
 * fopen() resolves symbolic links itself before it opens), so every file is checked on the
 * open descriptor, never only by its name before the open:
 *   - a symbolic link, a FIFO or anything but a regular file at the lock or heartbeat path
 *     is refused;
 *   - a file is opened (never created, truncated or re-permissioned through its name), then
 *     fstat() of the descriptor is compared with lstat() of the path: same device and
 *     inode, a regular file — a link or another file put at the name meanwhile is refused
 *     before anything is written; nothing is ever chmod'ed (there is no fchmod in PHP);
 *   - a missing file is created under a new random name in its directory (128 random
 *     bits: no link can wait there) and linked to its name with link(2), which never
 *     follows or replaces what is at the name; as root, the directory is named by a
 *     descriptor held open on it (/proc/self/fd/N/NAME), so a directory on the way swapped
 *     meanwhile cannot make the file appear anywhere else;
 *   - the heartbeat's time is set on the descriptor (ftruncate to its own size: no byte
 *     changes), never by touch() on the name;
 *   - running as root, moreover: a symbolic link on the way is followed only when it
 *     belongs to root and sits in a directory nobody else can write (so /var/run -> /run
 *     works, a link the PHP user made does not); a file is written (holder line, heartbeat)
 *     only when it is root's and has no other name (hard link), else the lock is taken
 *     read-only and the heartbeat is refused; and the descriptor's own path
 *     (/proc/self/fd) must be the path reached, so that a directory on the way swapped for
 *     a link during the open is caught too (where /proc is not mounted, that last check is
 *     not made).
 * Files are opened non-blocking ('n'), so a FIFO planted at a name never hangs the job.
 * These checks assume PHP's usual non-thread-safe build (php-cli); a thread-safe (ZTS)
 * build resolves every path itself.
 *
 * PHP 7.0 or newer, no extension beyond the core (posix is used when present, else
 * /proc/self/status). Without Composer: require this file (it loads LockNotObtained.php
 * beside it). With Composer, add the directory to the classmap:
 * "autoload": {"classmap": ["/usr/share/selfheal/php/"]}.
 * Part of selfheal; installed in /usr/share/selfheal/php/.
 */

namespace Selfheal;

require_once __DIR__ . '/LockNotObtained.php';

class Job
{
    /** The longest 'wait' or 'every', in seconds: 100 years, as `selfheal run`'s. */
    const LONGEST = 3155760000;

    /** At most this much of a lock file is read: a holder line is short. */
    const MAX_READ = 512;

    /** Symbolic links followed on the way to a file, at most (the kernel's own limit). */
    const MAX_LINKS = 40;

    /** How often a file may change under the helper while it is opened, at most. */
    const MAX_TRIES = 5;

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
     * 'every' (seconds, default 10); 'wait' and 'every' at most 100 years.
     *
     * @throws LockNotObtained          the lock was held longer than 'wait'
     * @throws \InvalidArgumentException an unknown option or a bad value
     * @throws \RuntimeException        the lock file cannot be opened or locked, or the
     *                                  heartbeat file cannot be touched, safely
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
            // The first touch must work: a job whose heartbeat cannot be kept would look
            // dead while it runs.
            try {
                self::keepHeartbeat($this->heartbeatFile);
            } catch (\RuntimeException $e) {
                $this->release();
                throw $e;
            }
            $this->nextBeat = $this->now() + $this->every;
        }
    }

    /** "HOST:PID" of this process: the value for the row's owner column. */
    public static function owner(): string
    {
        return gethostname() . ':' . getmypid();
    }

    /**
     * Touches the heartbeat file if the last touch is at least 'every' seconds ago.
     * Returns whether it touched. Call it as often as you like. A touch that fails is
     * reported once (E_USER_WARNING) until one works again.
     */
    public function beat(): bool
    {
        $now = $this->hrtime ? hrtime(true) : microtime(true) * 1e9;
        if ($now < $this->nextBeat) {
            return false;
        }
        $this->nextBeat = $now + $this->every;
        try {
            self::keepHeartbeat($this->heartbeatFile);
        } catch (\RuntimeException $e) {
            $this->warnOnce(preg_replace('/^Selfheal\\\\Job: /', '', $e->getMessage()));
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
        list($fh, $writable) = self::openLock($path);
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
                $content = (string) stream_get_contents($fh, self::MAX_READ, 0);
                $who = self::holderText($fh, $content);
                fclose($fh);
                $lines = explode("\n", $content);
                $waited = $wait > 0 ? ($now - $start) / 1e9 : 0.0;   // 0: one try
                throw new LockNotObtained($path, trim($lines[0]), $waited, $who);
            }
            usleep((int) max(1, min($pause, ($deadline - $now) / 1000)));
            $pause = min($pause * 2, 100000);
        }
        // Judged again now that it is held: only a file that still takes a line gets one,
        // in place — the line at offset 0, then the file cut to its length.
        $st = fstat($fh);
        if ($writable && $st !== false && self::takesALine($fh, $st)) {
            $line = self::holderLine();
            fseek($fh, 0);
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
        if (is_nan($v) || $v < $min) {
            throw new \InvalidArgumentException("Selfheal\\Job: '$key' must be at least $min seconds");
        }
        if ($v > self::LONGEST) {
            throw new \InvalidArgumentException(
                "Selfheal\\Job: '$key' must be at most 100 years (" . self::LONGEST . ' seconds)'
            );
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

    // -------------------------------------------------------------------------------------
    // Files, opened so that no link or file someone else put in the way is written

    /**
     * Opens the lock file, creating it if missing: array(stream, opened for writing). A
     * file that does not take a holder line, that this user cannot write, or (as root) that
     * is not root's alone, is opened read-only.
     */
    private static function openLock($path)
    {
        $p = self::place($path);
        for ($try = 0; $try < self::MAX_TRIES; $try++) {
            $ro = self::openExisting($p, 'rn', false);
            if ($ro === null) {
                self::create($p);
                continue;
            }
            list($fh, $st) = $ro;
            if (!self::takesALine($fh, $st) || !self::mayWrite($p, $st)) {
                return array($fh, false);
            }
            $rw = self::openExisting($p, 'r+n', true);
            if ($rw === false) {
                return array($fh, false);   // not writable by this user: locked read-only
            }
            fclose($fh);
            if ($rw !== null && $rw[1]['dev'] === $st['dev'] && $rw[1]['ino'] === $st['ino']) {
                return array($rw[0], true);
            }
            if ($rw !== null) {
                fclose($rw[0]);   // replaced between the two opens: judged again
            }
        }
        throw self::refused($p, 'kept changing while it was opened');
    }

    /** Sets the heartbeat file's modification time to now, creating it if missing. */
    private static function keepHeartbeat($path)
    {
        $p = self::place($path);
        for ($try = 0; $try < self::MAX_TRIES; $try++) {
            $o = self::openExisting($p, 'r+n', false);
            if ($o === null) {
                self::create($p);
                continue;
            }
            list($fh, $st) = $o;
            if (!self::mayWrite($p, $st)) {
                fclose($fh);
                throw self::refused($p, $st['nlink'] > 1
                    ? 'has ' . $st['nlink'] . ' names (hard links); only a file with no other name is written'
                    : 'owned by ' . self::who($st['uid']) . ', not by ' . self::who($p['me'])
                        . ' who runs the job');
            }
            // No futimes in PHP, and touch() would go by the name: cutting the file to its
            // own size changes no byte and sets its modification time to now.
            $ok = ftruncate($fh, $st['size']);
            fclose($fh);
            if (!$ok) {
                throw self::refused($p, 'its modification time could not be set');
            }
            return;
        }
        throw self::refused($p, 'kept changing while it was opened');
    }

    /**
     * Where a file is: array('given', 'dir', 'name', 'path', 'strict', 'me'). As root
     * ('strict'), the directory is reached by self::walk(), and 'path' is the path the
     * kernel will resolve to.
     */
    private static function place($given)
    {
        $me = self::euid();
        // Root's rules when the user cannot be told (no posix, no /proc): the safe side.
        $strict = $me === null || $me === 0;
        $p = array('given' => $given, 'strict' => $strict, 'me' => $me === null ? 0 : $me);
        if ($given === '' || strpos($given, "\0") !== false) {
            throw self::refused($p, 'not a file name');
        }
        $cwd = $given[0] === '/' ? '' : getcwd();
        if ($cwd === false) {
            throw self::refused($p, 'a relative path, and the working directory is gone');
        }
        $abs = $cwd === '' ? $given : rtrim($cwd, '/') . '/' . $given;
        $slash = strrpos($abs, '/');
        $name = (string) substr($abs, $slash + 1);
        if ($name === '' || $name === '.' || $name === '..') {
            throw self::refused($p, 'names a directory, not a file');
        }
        $dir = $slash === 0 ? '/' : (string) substr($abs, 0, $slash);
        if ($strict) {
            $dir = self::walk($dir, $p);
        }
        $p['dir'] = $dir;
        $p['name'] = $name;
        $p['path'] = rtrim($dir, '/') . '/' . $name;
        return $p;
    }

    /**
     * The directory $dir, reached from / one component at a time: a symbolic link is
     * followed only when it is root's (or this user's) and sits in a directory nobody else
     * can write (docs/design.md#writes); '..' goes back up the directories walked. Returns the path with
     * no link left in it.
     */
    private static function walk($dir, array $p)
    {
        $todo = array_reverse(explode('/', $dir));
        $cur = '';          // the directory reached so far ('' is /)
        $parents = array();
        $links = 0;
        while (count($todo) > 0) {
            $c = array_pop($todo);
            if ($c === '' || $c === '.') {
                continue;
            }
            if ($c === '..') {
                $cur = count($parents) > 0 ? array_pop($parents) : '';
                continue;
            }
            $here = $cur . '/' . $c;
            $st = self::lstatNow($here);
            if ($st === false) {
                throw self::refused($p, "$here does not exist");
            }
            $type = $st['mode'] & 0170000;
            if ($type === 0040000) {
                $parents[] = $cur;
                $cur = $here;
                continue;
            }
            if ($type !== 0120000) {
                throw self::refused($p, "$here is not a directory");
            }
            $d = self::lstatNow($cur === '' ? '/' : $cur);
            $ownerTrusted = $st['uid'] === 0 || $st['uid'] === $p['me'];
            $dirTrusted = $d !== false && ($d['uid'] === 0 || $d['uid'] === $p['me'])
                && ($d['mode'] & 0022) === 0;
            if (!$ownerTrusted || !$dirTrusted) {
                throw self::refused($p, "refused to follow $here: a symbolic link"
                    . ($ownerTrusted ? '' : ' owned by ' . self::who($st['uid']))
                    . ($dirTrusted ? '' : ' in a directory another user can write'));
            }
            if (++$links > self::MAX_LINKS) {
                throw self::refused($p, 'more than ' . self::MAX_LINKS . " symbolic links on the way (stopped at $here)");
            }
            $target = @readlink($here);
            if (!is_string($target) || $target === '') {
                throw self::refused($p, "cannot read the symbolic link $here");
            }
            if ($target[0] === '/') {
                $cur = '';
                $parents = array();
            }
            foreach (array_reverse(explode('/', $target)) as $t) {
                $todo[] = $t;
            }
        }
        return $cur === '' ? '/' : $cur;
    }

    /**
     * Opens the existing file at $p with $mode ('rn' or 'r+n': never creating, never
     * truncating, never blocking) and checks that the descriptor is the regular file at
     * the path: array(stream, fstat). null when nothing is at the path; false when it
     * cannot be opened and $tolerant (else a RuntimeException).
     */
    private static function openExisting(array $p, $mode, $tolerant)
    {
        clearstatcache(true);   // fopen() resolves links itself, through a cache
        $before = self::lstatNow($p['path']);
        if ($before === false) {
            return null;
        }
        self::mustBeRegular($p, $before);
        $fh = @fopen($p['path'], $mode);
        if ($fh === false) {
            $e = error_get_last();
            if (self::lstatNow($p['path']) === false) {
                return null;
            }
            if ($tolerant) {
                return false;
            }
            throw self::refused($p, 'cannot open: ' . ($e ? $e['message'] : 'fopen failed'));
        }
        $st = fstat($fh);
        $now = self::lstatNow($p['path']);
        $why = null;
        if ($st === false || ($st['mode'] & 0170000) !== 0100000) {
            $why = 'is not a regular file; refused';
        } elseif ($now === false || $now['dev'] !== $st['dev'] || $now['ino'] !== $st['ino']) {
            $why = 'changed while it was opened (a link or another file was put at its name); refused';
        } elseif ($p['strict'] && !self::openedAt($st, $p['path'])) {
            $why = 'was opened elsewhere than at its path (a directory on the way changed); refused';
        }
        if ($why !== null) {
            fclose($fh);
            throw self::refused($p, $why);
        }
        return array($fh, $st);
    }

    /** Refuses a link or anything but a regular file at the name. */
    private static function mustBeRegular(array $p, array $st)
    {
        $type = $st['mode'] & 0170000;
        if ($type === 0120000) {
            throw self::refused($p, 'is a symbolic link; refused');
        }
        if ($type !== 0100000) {
            $kinds = array(0010000 => 'a FIFO', 0020000 => 'a character device', 0040000 => 'a directory',
                0060000 => 'a block device', 0140000 => 'a socket');
            $kind = isset($kinds[$type]) ? $kinds[$type] : 'not a file';
            throw self::refused($p, "is $kind, not a regular file; refused");
        }
    }

    /**
     * Creates the missing file at $p, mode 0644 less the umask: under a new random name in
     * its directory, then linked to its name (link(2) neither follows nor replaces what is
     * there: another process's file made meanwhile stays, and is then opened as it is). As
     * root, the directory is named by a descriptor held open on it (/proc/self/fd/N), so
     * that the file cannot be made elsewhere through a directory on the way swapped for a
     * link (touch(), link() and unlink() pass such a path to the kernel as it is).
     */
    private static function create(array $p)
    {
        $dir = $p['strict'] ? self::dirHandle($p) : null;
        $base = $dir === null ? rtrim($p['dir'], '/') : $dir[1];
        $tmp = $base . '/.' . substr($p['name'], 0, 100) . '.' . bin2hex(random_bytes(16)) . '.tmp';
        $umask = umask();
        umask($umask | 0022);
        clearstatcache(true);
        if ($dir !== null) {
            $made = @touch($tmp);
        } else {
            $fh = @fopen($tmp, 'x+n');
            $made = $fh !== false;
            if ($made) {
                fclose($fh);
            }
        }
        umask($umask);
        if (!$made) {
            $e = error_get_last();
            self::closeDir($dir);
            throw self::refused($p, 'cannot create it: ' . ($e ? $e['message'] : 'failed'));
        }
        $linked = @link($tmp, $base . '/' . $p['name']);
        $e = error_get_last();
        @unlink($tmp);
        self::closeDir($dir);
        if (!$linked && self::lstatNow($p['path']) === false) {
            throw self::refused($p, 'cannot create it: ' . ($e ? $e['message'] : 'link failed'));
        }
    }

    /**
     * The directory of $p held open: array(directory stream, "/proc/self/fd/N"), when the
     * kernel says the descriptor is the directory at $p['dir'] (same device and inode as
     * lstat() saw, and that path); null where /proc cannot tell (no /proc: the directory
     * is named by its path). A directory swapped while it was opened is refused.
     */
    private static function dirHandle(array $p)
    {
        $fds = @scandir('/proc/self/fd');
        if ($fds === false) {
            return null;
        }
        $st = self::lstatNow($p['dir']);
        $dh = $st !== false && ($st['mode'] & 0170000) === 0040000 ? @opendir($p['dir']) : false;
        if ($dh !== false) {
            foreach (@scandir('/proc/self/fd') ?: array() as $fd) {
                $link = "/proc/self/fd/$fd";
                if (!preg_match('/^[0-9]+$/', $fd) || @readlink($link) !== $p['dir']) {
                    continue;
                }
                clearstatcache();
                $s = @stat($link);
                if ($s !== false && $s['dev'] === $st['dev'] && $s['ino'] === $st['ino']) {
                    return array($dh, $link);
                }
            }
            closedir($dh);
        }
        throw self::refused($p, 'its directory changed while it was opened; refused');
    }

    private static function closeDir($dir)
    {
        if ($dir !== null) {
            closedir($dir[0]);
        }
    }

    /** A file this process may write into: any, but as root only root's with one name. */
    private static function mayWrite(array $p, array $st)
    {
        return !$p['strict'] || ($st['uid'] === $p['me'] && $st['nlink'] === 1);
    }

    /** The file is empty, or holds a holder line already (docs/design.md#run-wrapper). */
    private static function takesALine($fh, array $st)
    {
        if ($st['size'] === 0) {
            return true;
        }
        if ($st['size'] > self::MAX_READ) {
            return false;
        }
        $head = stream_get_contents($fh, self::MAX_READ, 0);
        return is_string($head) && LockNotObtained::parseLine($head) !== null;
    }

    /**
     * True when the descriptor open on the file $st is at $path, as the kernel says
     * (/proc/self/fd); also true where /proc cannot be read (not checked).
     */
    private static function openedAt(array $st, $path)
    {
        $fds = @scandir('/proc/self/fd');
        if ($fds === false) {
            return true;
        }
        foreach ($fds as $fd) {
            if (!preg_match('/^[0-9]+$/', $fd)) {
                continue;
            }
            $link = "/proc/self/fd/$fd";
            if (@readlink($link) !== $path) {
                continue;
            }
            clearstatcache();
            $s = @stat($link);
            if ($s !== false && $s['dev'] === $st['dev'] && $s['ino'] === $st['ino']) {
                return true;
            }
        }
        return false;
    }

    /** lstat() now, not from PHP's stat cache; false when nothing is there. */
    private static function lstatNow($path)
    {
        clearstatcache();
        return @lstat($path);
    }

    /** The effective uid of this process, or null when it cannot be told. */
    private static function euid()
    {
        if (function_exists('posix_geteuid')) {
            return posix_geteuid();
        }
        $status = @file_get_contents('/proc/self/status');
        if (is_string($status) && preg_match('/^Uid:\s+[0-9]+\s+([0-9]+)/m', $status, $m)) {
            return (int) $m[1];
        }
        return null;
    }

    /** "www-data (uid 33)", or "uid 33" when the name cannot be looked up. */
    private static function who($uid)
    {
        if (function_exists('posix_getpwuid')) {
            $pw = posix_getpwuid($uid);
            if (is_array($pw) && isset($pw['name'])) {
                return LockNotObtained::printable($pw['name'], 32) . " (uid $uid)";
            }
        }
        return "uid $uid";
    }

    private static function refused(array $p, $why)
    {
        return new \RuntimeException('Selfheal\\Job: ' . $p['given'] . ": $why");
    }

    // -------------------------------------------------------------------------------------
    // Who holds the lock, in the words of `selfheal run`'s refusal

    /** Who holds the lock on $fh (its first bytes: $content), as far as this host tells. */
    private static function holderText($fh, $content)
    {
        $st = fstat($fh);
        $locks = $st === false ? null : self::locksOn($st['ino']);
        if ($locks !== null && count($locks) > 0) {
            $shared = array();
            foreach ($locks as $l) {
                if (!$l['shared']) {
                    $shared = array();
                    break;
                }
                $shared[] = self::processText($l['pid'], true);
            }
            if (count($shared) > 0) {
                return implode(', ', $shared)
                    . ', with a shared lock (not a run of this job, which locks exclusively)';
            }
        }
        $line = LockNotObtained::parseLine($content);
        if ($line === null) {
            $pid = $locks !== null && count($locks) > 0 ? $locks[0]['pid'] : null;
            if ($pid !== null && self::pidState($pid) === true) {
                return self::processText($pid, false) . ' (the file names no holder)';
            }
            return 'an unknown process: the file names no holder (HOST:PID START), and none is '
                . 'visible to this user';
        }
        $who = LockNotObtained::since($line, time());
        if ($line['host'] !== gethostname()) {
            return "$who, on another host";
        }
        $state = self::pidState($line['pid']);
        if ($state === null) {
            return "$who (whether it still runs cannot be told)";
        }
        return $state ? $who : "$who, which is gone: a process it left behind keeps the lock";
    }

    /** The locks /proc/locks lists on inode $ino: array(array('pid', 'shared')); null when unreadable. */
    private static function locksOn($ino)
    {
        $text = @file_get_contents('/proc/locks');
        if (!is_string($text)) {
            return null;
        }
        $out = array();
        foreach (explode("\n", $text) as $row) {
            $f = preg_split('/\s+/', trim($row));
            if (count($f) < 6 || $f[1] === '->' || !in_array($f[1], array('FLOCK', 'POSIX', 'OFDLCK'), true)) {
                continue;
            }
            $dev = explode(':', $f[5]);
            if (count($dev) === 3 && $dev[2] === (string) $ino) {
                $pid = (int) $f[4];
                $out[] = array('pid' => $pid > 0 ? $pid : null, 'shared' => $f[3] === 'READ');
            }
        }
        return $out;
    }

    /** True when process $pid exists, false when it does not, null when it cannot be told. */
    private static function pidState($pid)
    {
        if (function_exists('posix_kill')) {
            return posix_kill($pid, 0) || posix_get_last_error() === 1;   // EPERM: it exists
        }
        clearstatcache();
        if (@is_dir('/proc/self')) {
            return @file_exists("/proc/$pid");
        }
        return null;
    }

    /** "pid 4242 (sleep)", with " of user www-data (uid 33)" when $user. */
    private static function processText($pid, $user)
    {
        if ($pid === null) {
            return 'a process this user cannot see';
        }
        $comm = @file_get_contents("/proc/$pid/comm");
        $text = "pid $pid (" . (is_string($comm) ? LockNotObtained::printable(trim($comm), 32) : '?') . ')';
        if ($user) {
            clearstatcache();
            $uid = @fileowner("/proc/$pid");
            if (is_int($uid)) {
                $text .= ' of user ' . self::who($uid);
            }
        }
        return $text;
    }
}
