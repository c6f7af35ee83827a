<?php
// Flags syntax and functions newer than PHP 7.0 in the files named on the command line
// (the helper promises PHP 7.0+), using the tokenizer of the php-cli at hand:
//
//   php syntax70.php FILE...
//
// Prints "FILE:LINE: WHAT" for each finding and exits 1 when there is one. What it looks
// for: nullable types and void (7.1), class constant visibility (7.1), short list
// destructuring `[$a, $b] =` and `foreach (… as [$a])` (7.1), multi-catch (7.1), trailing
// commas in calls and parameter lists (7.3, 8.0), typed properties (7.4), `??=` and arrow
// functions (7.4), match, nullsafe `?->`, attributes, enums, readonly (8.x), the types
// iterable, object, mixed and never, and functions added after 7.0 (hrtime() only behind
// function_exists()).

$newer = array(
    'str_contains', 'str_starts_with', 'str_ends_with', 'array_key_first', 'array_key_last',
    'is_iterable', 'is_countable', 'array_is_list', 'get_debug_type', 'fdiv', 'spl_object_id',
    'mb_str_split', 'net_get_interfaces', 'password_algos', 'array_find',
);
$newTypes = array('void', 'iterable', 'object', 'mixed', 'never');
$tokenNames = array(
    'T_COALESCE_EQUAL' => '??= (7.4)', 'T_FN' => 'arrow function (7.4)', 'T_MATCH' => 'match (8.0)',
    'T_NULLSAFE_OBJECT_OPERATOR' => '?-> (8.0)', 'T_ATTRIBUTE' => 'attribute (8.0)',
    'T_ENUM' => 'enum (8.1)', 'T_READONLY' => 'readonly (8.1)',
);
$found = 0;
foreach (array_slice($argv, 1) as $file) {
    $all = token_get_all(file_get_contents($file));
    // Significant tokens only: [kind, text, line].
    $t = array();
    $line = 1;
    foreach ($all as $tok) {
        if (is_array($tok)) {
            // The line a one-character token is on: after this token's own newlines.
            $line = $tok[2] + substr_count($tok[1], "\n");
            if (in_array($tok[0], array(T_WHITESPACE, T_COMMENT, T_DOC_COMMENT), true)) {
                continue;
            }
            $t[] = array($tok[0], $tok[1], $tok[2]);
        } else {
            $t[] = array($tok, $tok, $line);
        }
    }
    $say = function ($i, $what) use ($file, $t, &$found) {
        echo "$file:{$t[$i][2]}: $what\n";
        $found++;
    };
    $is = function ($i, $kind) use ($t) {
        return isset($t[$i]) && $t[$i][0] === $kind;
    };
    $parens = array();   // for each open '(': what opened it
    $guardedHrtime = strpos(file_get_contents($file), "function_exists('hrtime')") !== false;
    $n = count($t);
    for ($i = 0; $i < $n; $i++) {
        list($kind, $text) = $t[$i];
        foreach ($tokenNames as $name => $what) {
            if (defined($name) && $kind === constant($name)) {
                $say($i, $what);
            }
        }
        if ($kind === '(') {
            $prev = $i > 0 ? $t[$i - 1][0] : null;
            $parens[] = in_array($prev, array(T_ARRAY, T_LIST), true) ? 'array'
                : ($prev === T_CATCH ? 'catch' : 'call');
        } elseif ($kind === ')') {
            $open = array_pop($parens);
            if ($open !== 'array' && $i > 0 && $t[$i - 1][0] === ',') {
                $say($i, 'trailing comma in a call or parameter list (7.3/8.0)');
            }
        } elseif ($kind === '|' && end($parens) === 'catch') {
            $say($i, 'multi-catch (7.1)');
        } elseif ($kind === '?' && $i > 0 && in_array($t[$i - 1][0], array('(', ',', ':'), true)
            && isset($t[$i + 1]) && !in_array($t[$i + 1][0], array(T_VARIABLE, T_LNUMBER, T_DNUMBER, T_CONSTANT_ENCAPSED_STRING), true)) {
            $say($i, 'nullable type (7.1)');
        } elseif ($kind === '[' && $i > 0 && in_array($t[$i - 1][0], array(';', '{', '}', T_AS, T_OPEN_TAG), true)) {
            $say($i, 'short list destructuring (7.1)');
        } elseif (in_array($kind, array(T_PUBLIC, T_PROTECTED, T_PRIVATE, T_VAR), true)) {
            $j = $i + 1;
            while ($is($j, T_STATIC) || $is($j, T_ABSTRACT) || $is($j, T_FINAL)) {
                $j++;
            }
            if ($is($j, T_CONST)) {
                $say($i, 'class constant visibility (7.1)');
            } elseif (!$is($j, T_VARIABLE) && !$is($j, T_FUNCTION)) {
                $say($i, 'typed property (7.4)');
            }
        } elseif ($kind === T_STRING) {
            $lower = strtolower($text);
            $prev = $i > 0 ? $t[$i - 1][0] : null;
            $call = $is($i + 1, '(') && !in_array($prev, array(T_FUNCTION, T_OBJECT_OPERATOR, T_DOUBLE_COLON, T_NEW), true);
            if ($call && in_array($lower, $newer, true)) {
                $say($i, "$text() is newer than PHP 7.0");
            }
            if ($call && $lower === 'hrtime' && !$guardedHrtime) {
                $say($i, 'hrtime() (7.3) without function_exists()');
            }
            if (in_array($lower, $newTypes, true) && ($is($i + 1, T_VARIABLE) || ($prev === ':' && $i > 1 && $t[$i - 2][0] === ')'))) {
                $say($i, "type $text is newer than PHP 7.0");
            }
        }
    }
}
exit($found > 0 ? 1 : 0);
