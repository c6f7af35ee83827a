<?php
// A job under attack, for tests/php/helper.rs: calls Selfheal\Job::start() ROUNDS times
// with one option on PATH, as many jobs starting one after another would:
//
//   php rounds.php lock|heartbeat PATH ROUNDS
//
// Prints "started N refused M": how many starts worked, and how many were refused with a
// RuntimeException (a link or another file in the way). Each round begins with PHP's stat
// and realpath caches empty, as each of those jobs would.

require __DIR__ . '/../../php/Selfheal/Job.php';

list(, $option, $path, $rounds) = $argv;
$started = 0;
$refused = 0;
for ($i = 0; $i < (int) $rounds; $i++) {
    // Each job is a new process: nothing in PHP's stat and realpath caches.
    clearstatcache(true);
    try {
        $job = Selfheal\Job::start(array($option => $path));
        $job->release();
        $job = null;
        $started++;
    } catch (RuntimeException $e) {
        $refused++;
    }
}
echo "started $started refused $refused\n";
