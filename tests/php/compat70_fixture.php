<?php
// Every construct tests/php/compat70.php must find, each on a line marked with what the scanner says of it.
// Valid for the php-cli that runs the tests; never loaded by anything else.

namespace Fixture;

#[\Attribute]                                             // finds: attribute
class Newer
{
    public int $typed = 1;                                // finds: typed property
    private const HIDDEN = 1;                             // finds: class constant with a visibility or final
    public readonly string $ro;                           // finds: typed property, readonly property

    public function __construct(private $promoted = 0)    // finds: constructor property promotion
    {
    }

    public function nullable(?string $s)                  // finds: nullable type in a parameter
    {
    }

    public function nothing(): void                       // finds: type void in a return type
    {
    }

    public function anything(int|string $v)               // finds: union type in a parameter
    {
    }

    public function more($a, $b)
    {
        $x ??= 1;                                         // finds: ??=
        $f = fn ($y) => $y;                               // finds: arrow function
        $m = match ($a) { 1 => 'one', default => 'other' };   // finds: match
        $l = $a?->b;                                      // finds: nullsafe operator ?->
        [$p, $q] = [1, 2];                                // finds: [...] as an assignment target (short list)
        list('k' => $v) = ['k' => 1];                     // finds: list() with keys
        try {
        } catch (\A | \B $e) {                            // finds: catch of several types
        }
        try {
        } catch (\A) {                                    // finds: catch without a variable
        }
        $z = $a ?? throw new \Exception();                // finds: throw as an expression
        $s = [...$a, 1];                                  // finds: spread inside an array
        $c = strlen(...);                                 // finds: first-class callable syntax
        $n = 1_000_000;                                   // finds: numeric literal separator
        $k = array_key_first($a);                         // finds: array_key_first() without function_exists()
        $e = JSON_THROW_ON_ERROR;                         // finds: constant JSON_THROW_ON_ERROR without defined()
        $w = str_contains(string: 'a', needle: 'b');      // finds: str_contains() without function_exists(), named argument, named argument
        $t = sprintf('%s', $a,);                          // finds: trailing comma in a call or a parameter or use list
        $ok = array(1, 2,);                               // PHP 5 allows this one
    }
}

enum Suit                                                 // finds: enum
{
    case Hearts;
}
