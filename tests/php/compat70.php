<?php
// Finds syntax and library calls newer than PHP 7.0 in the given files, for
// tests/php/lease.rs (selfheal's PHP helpers promise PHP 7.0+ and CI has a newer php-cli).
//
//   php compat70.php FILE...
//
// Parses each file with PHP-Parser (Debian's php-parser, /usr/share/php/PhpParser) and
// prints one line per finding, "FILE:LINE: WHAT (PHP X.Y)"; exits 1 when there is any, 2
// when a file cannot be parsed. What it finds: nullable, void, iterable, object, mixed,
// static, never and union/intersection types; typed and promoted properties; ??=; arrow
// functions; match; nullsafe -> ; attributes; enums; readonly; named arguments; throw as an
// expression; [...] and list() with keys as assignment targets; spread with string keys
// or in arrays; class constants with visibility; catch of several types; catch without a
// variable; first-class callables; numeric literal separators; trailing commas in calls,
// parameter and use lists; flexible heredocs; and calls of functions (and uses of
// constants) added after 7.0 unless the file asks function_exists()/defined() for them.

require '/usr/share/php/PhpParser/autoload.php';

use PhpParser\Node;
use PhpParser\NodeTraverser;
use PhpParser\NodeVisitorAbstract;
use PhpParser\ParserFactory;

const NEWER_FUNCTIONS = [
    'is_iterable' => '7.1', 'spl_object_id' => '7.2', 'array_key_first' => '7.3',
    'array_key_last' => '7.3', 'is_countable' => '7.3', 'hrtime' => '7.3',
    'net_get_interfaces' => '7.3', 'mb_str_split' => '7.4', 'get_mangled_object_vars' => '7.4',
    'str_contains' => '8.0', 'str_starts_with' => '8.0', 'str_ends_with' => '8.0',
    'get_debug_type' => '8.0', 'get_resource_id' => '8.0', 'fdiv' => '8.0',
    'preg_last_error_msg' => '8.0', 'array_is_list' => '8.1', 'fsync' => '8.1',
    'fdatasync' => '8.1', 'enum_exists' => '8.1', 'mysqli_execute_query' => '8.2',
];
const NEWER_CONSTANTS = [
    'PHP_FLOAT_EPSILON' => '7.2', 'PHP_FLOAT_MAX' => '7.2', 'PHP_FLOAT_MIN' => '7.2',
    'PHP_OS_FAMILY' => '7.2', 'JSON_THROW_ON_ERROR' => '7.3', 'JSON_INVALID_UTF8_IGNORE' => '7.2',
    'JSON_INVALID_UTF8_SUBSTITUTE' => '7.2', 'PASSWORD_ARGON2I' => '7.2',
];

class Finder extends NodeVisitorAbstract
{
    public $found = [];
    private $file;
    private $guarded;

    public function __construct($file, $code)
    {
        $this->file = $file;
        // function_exists('x') / defined('X') anywhere in the file: a guarded use.
        preg_match_all('/\b(?:function_exists|defined)\(\s*[\'"]\\\\?([A-Za-z0-9_]+)[\'"]/', $code, $m);
        $this->guarded = array_flip(array_map('strtolower', $m[1]));
    }

    private function add(Node $n, $what, $version)
    {
        $this->found[] = sprintf('%s:%d: %s (PHP %s)', $this->file, $n->getStartLine(), $what, $version);
    }

    private function type($t, Node $at, $where)
    {
        if ($t === null) {
            return;
        }
        if ($t instanceof Node\NullableType) {
            $this->add($at, "nullable type in $where", '7.1');
            return;
        }
        if ($t instanceof Node\UnionType) {
            $this->add($at, "union type in $where", '8.0');
            return;
        }
        if ($t instanceof Node\IntersectionType) {
            $this->add($at, "intersection type in $where", '8.1');
            return;
        }
        $name = strtolower($t instanceof Node\Identifier ? $t->name : $t->toString());
        $newer = ['void' => '7.1', 'iterable' => '7.1', 'object' => '7.2', 'mixed' => '8.0',
                  'static' => '8.0', 'never' => '8.1', 'null' => '8.2', 'false' => '8.0',
                  'true' => '8.2'];
        if (isset($newer[$name])) {
            $this->add($at, "type $name in $where", $newer[$name]);
        }
    }

    public function enterNode(Node $n)
    {
        if ($n instanceof Node\FunctionLike) {
            foreach ($n->getParams() as $p) {
                $this->type($p->type, $p, 'a parameter');
                if ($p->flags !== 0) {
                    $this->add($p, 'constructor property promotion', '8.0');
                }
                if ($p->attrGroups) {
                    $this->add($p, 'attribute', '8.0');
                }
            }
            $this->type($n->getReturnType(), $n, 'a return type');
        }
        if ($n instanceof Node\Stmt\Property) {
            if ($n->type !== null) {
                $this->add($n, 'typed property', '7.4');
            }
            if ($n->flags & Node\Stmt\Class_::MODIFIER_READONLY) {
                $this->add($n, 'readonly property', '8.1');
            }
        }
        if ($n instanceof Node\Stmt\ClassConst && $n->flags !== 0) {
            $this->add($n, 'class constant with a visibility or final', '7.1');
        }
        if ($n instanceof Node\Expr\AssignOp\Coalesce) {
            $this->add($n, '??=', '7.4');
        }
        if ($n instanceof Node\Expr\ArrowFunction) {
            $this->add($n, 'arrow function', '7.4');
        }
        if ($n instanceof Node\Expr\Match_) {
            $this->add($n, 'match', '8.0');
        }
        if ($n instanceof Node\Expr\NullsafeMethodCall || $n instanceof Node\Expr\NullsafePropertyFetch) {
            $this->add($n, 'nullsafe operator ?->', '8.0');
        }
        if ($n instanceof Node\AttributeGroup) {
            $this->add($n, 'attribute', '8.0');
        }
        if ($n instanceof Node\Stmt\Enum_) {
            $this->add($n, 'enum', '8.1');
        }
        if ($n instanceof Node\Arg && $n->name !== null) {
            $this->add($n, 'named argument', '8.0');
        }
        if ($n instanceof Node\Expr\Throw_) {
            $this->add($n, 'throw as an expression', '8.0');
        }
        if ($n instanceof Node\Stmt\Catch_) {
            if (count($n->types) > 1) {
                $this->add($n, 'catch of several types', '7.1');
            }
            if ($n->var === null) {
                $this->add($n, 'catch without a variable', '8.0');
            }
        }
        if ($n instanceof Node\Expr\Assign || $n instanceof Node\Stmt\Foreach_) {
            $target = $n instanceof Node\Expr\Assign ? $n->var : $n->valueVar;
            if ($target instanceof Node\Expr\Array_) {
                $this->add($n, '[...] as an assignment target (short list)', '7.1');
            }
            if ($target instanceof Node\Expr\List_) {
                foreach ($target->items as $item) {
                    if ($item !== null && $item->key !== null) {
                        $this->add($n, 'list() with keys', '7.1');
                        break;
                    }
                }
            }
        }
        if ($n instanceof Node\Expr\ArrayItem && $n->unpack) {
            $this->add($n, 'spread inside an array', '7.4');
        }
        if ($n instanceof Node\Expr\CallLike && $n->isFirstClassCallable()) {
            $this->add($n, 'first-class callable syntax', '8.1');
        }
        if ($n instanceof Node\Expr\FuncCall && $n->name instanceof Node\Name) {
            $f = strtolower($n->name->getLast());
            if (isset(NEWER_FUNCTIONS[$f]) && !isset($this->guarded[$f])) {
                $this->add($n, "$f() without function_exists()", NEWER_FUNCTIONS[$f]);
            }
        }
        if ($n instanceof Node\Expr\ConstFetch) {
            $c = $n->name->getLast();
            if (isset(NEWER_CONSTANTS[$c]) && !isset($this->guarded[strtolower($c)])) {
                $this->add($n, "constant $c without defined()", NEWER_CONSTANTS[$c]);
            }
        }
        return null;
    }
}

/** Token checks the syntax tree does not keep: trailing commas, flexible heredocs, _ in numbers. */
function token_findings($file, $code)
{
    $found = [];
    $tokens = token_get_all($code);
    $sig = [];
    foreach ($tokens as $t) {
        if (is_array($t) && in_array($t[0], [T_WHITESPACE, T_COMMENT, T_DOC_COMMENT], true)) {
            continue;
        }
        $sig[] = $t;
    }
    $line = 1;
    $stack = [];   // for each open parenthesis: true when it opens array(…)
    foreach ($sig as $i => $t) {
        if (is_array($t)) {
            $line = $t[2];
            if ($t[0] === T_LNUMBER || $t[0] === T_DNUMBER) {
                if (strpos($t[1], '_') !== false) {
                    $found[] = "$file:$line: numeric literal separator (PHP 7.4)";
                }
            }
            if ($t[0] === T_END_HEREDOC && preg_match('/^\s/', $t[1])) {
                $found[] = "$file:$line: indented heredoc end marker (PHP 7.3)";
            }
            continue;
        }
        if ($t === '(') {
            $prev = $i > 0 ? $sig[$i - 1] : null;
            $stack[] = is_array($prev) && ($prev[0] === T_ARRAY || $prev[0] === T_LIST);
        } elseif ($t === ')') {
            $prev = $i > 0 ? $sig[$i - 1] : null;
            $isArray = array_pop($stack);
            if ($prev === ',' && !$isArray) {
                $found[] = "$file:$line: trailing comma in a call or a parameter or use list (PHP 7.3/8.0)";
            }
        }
    }
    return $found;
}

$parser = (new ParserFactory())->create(ParserFactory::ONLY_PHP7);
$all = [];
foreach (array_slice($argv, 1) as $file) {
    $code = file_get_contents($file);
    try {
        $ast = $parser->parse($code);
    } catch (PhpParser\Error $e) {
        fwrite(STDERR, "$file: cannot parse: {$e->getMessage()}\n");
        exit(2);
    }
    $finder = new Finder($file, $code);
    $t = new NodeTraverser();
    $t->addVisitor($finder);
    $t->traverse($ast);
    $all = array_merge($all, $finder->found, token_findings($file, $code));
}
foreach ($all as $line) {
    echo $line, "\n";
}
exit($all ? 1 : 0);
