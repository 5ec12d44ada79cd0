"""The expression language of workflow definitions: CEL.

CEL (the Common Expression Language, as Kubernetes uses it for admission
rules) has no side effects, no loops beyond its list macros, no access to
objects beyond the data it is given, and parses to a typed program; it is
evaluated here by `common-expression-language` (Rust bindings: about 12 µs
per condition, with parse errors that point at the column). A tenant's
expression can still be made expensive (nested macros over large lists), so
every expression is bounded before it runs: its length, its nesting, and the
nesting of its macros; every result is bounded in size after.

Where expressions appear in a definition:
- `when`, `map.over`: a bare CEL expression (`inputs.amount > 100`);
- values of `args`, `input`, `output` and `compensate.args`: a string that is
  exactly `${ expr }` is replaced by the expression's value (any JSON type);
  a string with `${ expr }` inside other text has each one replaced by its
  value as text; anything else is literal. Objects and lists are walked.

What an expression sees (the "activation"): `inputs` (the run's input),
`nodes` (each finished node's output by id: `nodes.lookup.amount`), and in a
map, `item` and `index`; in a compensation, `output` (the node's own output).
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import cel

MAX_SOURCE_CHARS = 2000
MAX_NESTING = 24  # brackets, braces and parentheses open at once
MAX_MACROS = 4  # list macros (map, filter, all, exists, exists_one) in one expression
MAX_RESULT_BYTES = 256 * 1024  # what one expression may produce, as JSON
# An expression with a list macro, or with more than MAX_CHEAP_PLUS `+` (a
# chain of list concatenations), costs more than its data's size: the
# library's macros rebuild their result list on every item, so their time
# grows with the square of the list. Such an expression runs only over data
# (the values it names) with lists of at most MAX_LOOP_ITEMS items and at most
# MAX_LOOP_DATA_BYTES in all; otherwise it fails with the reason, at once.
MAX_LOOP_ITEMS = 1000
MAX_LOOP_DATA_BYTES = 256 * 1024
MAX_CHEAP_PLUS = 8
ROOTS = frozenset({"inputs", "nodes", "item", "index", "output"})

_TEMPLATE = re.compile(r"\$\{(.*?)\}", re.DOTALL)
_WHOLE = re.compile(r"^\s*\$\{(.*)\}\s*$", re.DOTALL)
_MACRO = re.compile(r"\.\s*(map|filter|all|exists|exists_one)\s*\(")
_BOUND = re.compile(  # the variable a macro binds: `.map(x, ...)`
    r"\.\s*(?:map|filter|all|exists|exists_one)\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*,")
_NODE_REF = re.compile(r"\bnodes\s*(?:\.\s*([A-Za-z_][A-Za-z0-9_]*)|\[\s*(['\"])([^'\"]*)\2\s*\])")
_NODES_DYNAMIC = re.compile(r"\bnodes\s*(?:\[\s*[^'\"\s]|(?![\s.\[]))")


class ExpressionError(ValueError):
    """An expression that does not parse, is too large, or failed to evaluate."""


@dataclass(frozen=True)
class Expression:
    source: str
    program: Any
    nodes: frozenset[str]  # the node ids it refers to
    loops: bool = False  # a list macro, or many `+`: its data is bounded before it runs

    def evaluate(self, activation: dict[str, Any]) -> Any:
        if self.loops:
            problem = _too_much_to_loop_over(self, activation)
            if problem:
                raise ExpressionError(f"{self.source!r}: {problem}")
        try:
            value = self.program.execute(activation)
        except Exception as exc:  # the library raises KeyError, ValueError, ZeroDivisionError…
            raise ExpressionError(f"{self.source!r}: {_message(exc)}") from exc
        problem = _not_json(value)
        if problem:
            raise ExpressionError(f"{self.source!r}: {problem}")
        size = len(json.dumps(value))
        if size > MAX_RESULT_BYTES:
            raise ExpressionError(f"{self.source!r}: its value is {size} bytes as JSON, "
                                  f"more than {MAX_RESULT_BYTES}")
        return value


def _too_much_to_loop_over(expr: Expression, activation: dict[str, Any]) -> str | None:
    """Why the data `expr` names is too large for an expression that loops, or None."""
    roots = set(expr.program.variables())  # the activation holds only allowed roots
    named: list[tuple[str, Any]] = []
    for root in sorted(roots & set(activation)):
        if root == "nodes":
            outputs = activation["nodes"] or {}
            named += [(f"nodes.{n}", outputs[n]) for n in sorted(expr.nodes) if n in outputs]
        else:
            named.append((root, activation[root]))
    why = (f"an expression with a list macro (or more than {MAX_CHEAP_PLUS} `+`) works over "
           f"lists of at most {MAX_LOOP_ITEMS} items and at most {MAX_LOOP_DATA_BYTES} bytes "
           "of data")
    size = 0
    stack = [(value, where) for where, value in named]
    while stack:
        value, where = stack.pop()
        if isinstance(value, dict):
            size += 2 + sum(len(str(k)) + 4 for k in value)
            stack.extend((v, f"{where}.{k}") for k, v in value.items())
        elif isinstance(value, list):
            if len(value) > MAX_LOOP_ITEMS:
                return f"{where} has {len(value)} items; {why}"
            size += 2 + len(value)
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(value))
        else:
            size += len(value) + 2 if isinstance(value, str) else 8
        if size > MAX_LOOP_DATA_BYTES:
            return f"the data it names is over {MAX_LOOP_DATA_BYTES} bytes; {why}"
    return None


def _not_json(value: Any) -> str | None:
    """Why a value cannot become a tool's arguments, a node's output or a run's
    result (stored as JSON), or None: CEL also has bytes, timestamps,
    durations, NaN and maps with other keys than strings."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            bad = next((k for k in item if not isinstance(k, str)), None)
            if bad is not None:
                return f"its value has a key that is not a string ({bad!r})"
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            if "\x00" in item:
                return "its value has a NUL (\\u0000) character"
        elif isinstance(item, float):
            if not math.isfinite(item):
                return f"its value has a number that is not finite ({item})"
        elif item is not None and not isinstance(item, bool | int):
            return (f"its value holds a value of type {type(item).__name__}, which is not "
                    "JSON (convert it with string(...))")
    return None


def _message(exc: Exception) -> str:
    if isinstance(exc, KeyError):
        return f"no such key {exc.args[0]!r}" if exc.args else "no such key"
    return str(exc).splitlines()[0][:300] or type(exc).__name__


def _code_only(source: str) -> str:
    """The source with the contents of string literals blanked, so that brackets
    and names inside strings are not counted as code."""
    out, quote, i = [], "", 0
    while i < len(source):
        ch = source[i]
        if quote:
            if ch == "\\":
                out.append("  ")
                i += 2
                continue
            if ch == quote:
                quote = ""
                out.append(ch)
            else:
                out.append(" ")
        else:
            if ch in "'\"":
                quote = ch
            out.append(ch)
        i += 1
    return "".join(out)


def _bounds(source: str) -> str:
    """Refuse what could run away before the library sees it; returns the code
    with string contents blanked."""
    if len(source) > MAX_SOURCE_CHARS:
        raise ExpressionError(f"an expression has at most {MAX_SOURCE_CHARS} characters")
    code = _code_only(source)
    depth = deepest = 0
    for ch in code:
        if ch in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in ")]}":
            depth -= 1
    if deepest > MAX_NESTING:
        raise ExpressionError(f"an expression nests at most {MAX_NESTING} levels deep")
    macros = list(_MACRO.finditer(code))
    if len(macros) > MAX_MACROS:
        raise ExpressionError(f"an expression uses at most {MAX_MACROS} list macros")
    if _nested_macro(code, macros):
        raise ExpressionError("a list macro (map, filter, all, exists) may not contain another: "
                              "its cost would grow with the product of the lists' sizes")
    return code


def _nested_macro(code: str, macros: list[re.Match[str]]) -> bool:
    """Does a macro's argument list contain another macro?"""
    for outer in macros:
        depth, end = 1, len(code)
        for j in range(outer.end(), len(code)):
            if code[j] == "(":
                depth += 1
            elif code[j] == ")":
                depth -= 1
                if depth == 0:
                    end = j
                    break
        if any(outer.end() <= inner.start() < end for inner in macros if inner is not outer):
            return True
    return False


def compile_expression(source: str, roots: frozenset[str] = ROOTS) -> Expression:
    """Parse `source` (bounded first); refers to nodes only by a literal id.
    `roots`: the names it may use (another user of the language, approval
    rules, gives its own)."""
    if not isinstance(source, str) or not source.strip():
        raise ExpressionError("an expression must be a non-empty string")
    code = _bounds(source)
    if _NODES_DYNAMIC.search(code):
        raise ExpressionError("refer to a node by its id (nodes.ID or nodes['ID']), "
                              "not by a computed key")
    try:
        program = cel.compile(source)
    except Exception as exc:  # noqa: BLE001 - the library's parse errors are ValueErrors
        raise ExpressionError(_message(exc)) from exc
    bound = {m.group(1) for m in _BOUND.finditer(code)}  # a macro's own variable
    unknown = sorted(set(program.variables()) - roots - bound)
    if unknown:
        raise ExpressionError(f"unknown name {unknown[0]!r}: an expression may use "
                              + ", ".join(sorted(roots)))
    named = code_with_names(source, code)
    nodes = frozenset(m.group(1) or m.group(3) for m in _NODE_REF.finditer(named))
    loops = bool(_MACRO.search(code)) or code.count("+") > MAX_CHEAP_PLUS
    return Expression(source, program, nodes, loops)


def code_with_names(source: str, code: str) -> str:
    """`code` with the string literals right after `nodes[` restored, so that
    `nodes['a-b']` keeps its id (every other string stays blanked)."""
    out = list(code)
    for m in re.finditer(r"\bnodes\s*\[\s*(['\"])", code):
        start = m.end()
        end = source.find(m.group(1), start)
        if end > 0:
            out[start:end] = source[start:end]
    return "".join(out)


# --- templates: values with ${ ... } --------------------------------------------------


def template_expressions(value: Any) -> Iterator[tuple[str, Expression]]:
    """Every expression in a template value, with its JSON path ("a.b[2]"); raises
    ExpressionError naming the path of the first that does not compile."""
    yield from _walk(value, "")


def _walk(value: Any, path: str) -> Iterator[tuple[str, Expression]]:
    if isinstance(value, str):
        for m in _TEMPLATE.finditer(value):
            try:
                yield path, compile_expression(m.group(1))
            except ExpressionError as exc:
                raise ExpressionError(f"{path or 'value'}: {exc}") from exc
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _walk(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _walk(item, f"{path}[{i}]")


def render(value: Any, activation: dict[str, Any]) -> Any:
    """The template `value` with every `${ expr }` evaluated against `activation`."""
    if isinstance(value, str):
        whole = _WHOLE.match(value)
        if whole and "${" not in whole.group(1):
            return compiled(whole.group(1)).evaluate(activation)
        if "${" not in value:
            return value
        return _TEMPLATE.sub(lambda m: _as_text(compiled(m.group(1)).evaluate(activation)), value)
    if isinstance(value, dict):
        return {key: render(item, activation) for key, item in value.items()}
    if isinstance(value, list):
        return [render(item, activation) for item in value]
    return value


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


_CACHE: dict[tuple[str, frozenset[str]], Expression] = {}
_CACHE_MAX = 4096


def compiled(source: str, roots: frozenset[str] = ROOTS) -> Expression:
    """`compile_expression`, memoized per process (definitions are immutable
    versions: the same few sources are evaluated again and again)."""
    found = _CACHE.get((source, roots))
    if found is None:
        found = compile_expression(source, roots)
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.clear()
        _CACHE[(source, roots)] = found
    return found
