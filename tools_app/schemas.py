"""Tenant-written JSON Schemas: what an admin may register, and the one
validator every such schema is applied with.

A tenant's admin writes tool argument and result schemas and agent result
schemas; tenants are untrusted, so a schema must not be able to stall a worker
or the server. `check_schema` accepts a JSON Schema 2020-12 only when, beyond
the metaschema:
- its JSON is at most `MAX_SCHEMA_BYTES` long and `MAX_SCHEMA_DEPTH` deep;
- every `$ref` is local (`#...`) and resolves to a subschema of the document:
  nothing is ever fetched. `$dynamicRef`, `$dynamicAnchor` and an `$id` below
  the root (which would move the base that `#` refers to) are refused;
- no cycle of subschemas applies to the same value without descending into it
  (`{"$ref": "#"}`, `{"allOf": [{"$ref": "#"}]}`, `$defs` that refer to each
  other); a cycle through `properties`, `items` and the like is fine, each
  turn takes a smaller part of the value. At most `MAX_IN_PLACE` subschemas
  apply to one value;
- every `pattern` and `patternProperties` key compiles with RE2, a linear-time
  engine (no backreferences, no lookaround);
- an `enum` lists at most `MAX_ENUM` values;
- no `unevaluatedProperties` or `unevaluatedItems`: jsonschema evaluates them
  outside its keyword checks (unmetered, quadratic in the value's size, and
  with Python's backtracking `re` for patternProperties).

`schema_errors` applies a schema with `TenantValidator`: Draft 2020-12 whose
regex keywords match with RE2, whose `enum`, `const` and `uniqueItems`
compare canonical JSON by hashing (jsonschema compares unsortable items
pairwise: quadratic), and whose work is metered: every keyword check costs a
unit, plus a unit per item, key or subschema it walks and per
`BYTES_PER_UNIT` of text it matches, encodes or prints, at most
`MAX_EVALUATIONS` units per validation. A value larger than
`MAX_VALUE_BYTES`, one that exhausts the meter, or one nested too deep to
validate, is invalid (a final verdict, never an exception to retry). Only the
first few errors are produced. A stored schema that breaks the rules above
(written before they existed) is never applied: `SchemaRefused`.
"""
from __future__ import annotations

import itertools
import json
import reprlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from functools import lru_cache
from typing import Any, NamedTuple

import re2
from jsonschema import Draft202012Validator, ValidationError, validators
from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from foundations.errors import DomainError

MAX_SCHEMA_BYTES = 64 * 1024
MAX_SCHEMA_DEPTH = 32
MAX_IN_PLACE = 1000
MAX_ENUM = 1000
MAX_EVALUATIONS = 100_000  # cost units (see the module's docstring) per validation
BYTES_PER_UNIT = 256
MAX_VALUE_BYTES = 1024 * 1024
MAX_MESSAGE_CHARS = 300

# Where each keyword's subschemas sit, and whether they apply to the value
# itself (in place) or to a part of it (descending).
_ONE, _LIST, _MAP = "one", "list", "map"
IN_PLACE = {"allOf": _LIST, "anyOf": _LIST, "oneOf": _LIST, "not": _ONE, "if": _ONE,
            "then": _ONE, "else": _ONE, "dependentSchemas": _MAP}
DESCENDING = {"properties": _MAP, "patternProperties": _MAP, "additionalProperties": _ONE,
              "propertyNames": _ONE, "unevaluatedProperties": _ONE, "items": _ONE,
              "prefixItems": _LIST, "contains": _ONE, "unevaluatedItems": _ONE,
              "contentSchema": _ONE}
CONTAINERS = {"$defs": _MAP, "definitions": _MAP}  # applied only through a $ref
REFUSED = ("$dynamicRef", "$dynamicAnchor", "$recursiveRef", "$recursiveAnchor",
           "unevaluatedProperties", "unevaluatedItems")


class SchemaRefused(DomainError):
    """A stored schema that today's registration rules refuse: it is not applied."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("schema_refused", "The stored schema is refused: " + "; ".join(problems),
                         details={"schema": problems})
        self.problems = problems


# --- registration ---------------------------------------------------------------


def check_schema(schema: Any) -> list[str]:
    """Problems of a schema an admin registers (empty when it may be stored)."""
    if not isinstance(schema, dict):
        return ["a schema must be a JSON object"]
    depth, nul = _measure(schema)
    if depth > MAX_SCHEMA_DEPTH:
        return [f"the schema is nested {depth} deep; at most {MAX_SCHEMA_DEPTH} is allowed"]
    try:
        size = len(json.dumps(schema, ensure_ascii=False).encode())
    except UnicodeEncodeError:
        return ["the schema contains an unpaired surrogate: it is not text"]
    if nul:
        return ["the schema contains a NUL (\\u0000) character"]
    if size > MAX_SCHEMA_BYTES:
        return [f"the schema is {size} bytes of JSON; at most {MAX_SCHEMA_BYTES} is allowed"]
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return [exc.message[:MAX_MESSAGE_CHARS]]
    return _structure_problems(schema)


def _measure(value: Any) -> tuple[int, bool]:
    """How deep JSON containers nest in `value` (iteratively: any depth is
    measured, up to just past the limit), and whether a string holds a NUL."""
    deepest, nul, stack = 0, False, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            nul = nul or "\x00" in item
        elif isinstance(item, dict | list):
            deepest = max(deepest, depth)
            if deepest > MAX_SCHEMA_DEPTH:
                break
            if isinstance(item, dict):
                stack.extend((key, depth) for key in item)
                item = list(item.values())
            stack.extend((v, depth + 1) for v in item)
    return deepest, nul


def _subschemas(node: dict[str, Any], table: dict[str, str]) -> Iterator[tuple[str, Any]]:
    """(JSON pointer suffix, subschema) under the keywords of `table`."""
    for keyword, shape in table.items():
        value = node.get(keyword)
        if shape == _ONE and value is not None:
            yield keyword, value
        elif shape == _LIST and isinstance(value, list):
            yield from ((f"{keyword}/{i}", v) for i, v in enumerate(value))
        elif shape == _MAP and isinstance(value, dict):
            yield from ((f"{keyword}/{_escape(k)}", v) for k, v in value.items())


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _structure_problems(schema: dict[str, Any]) -> list[str]:
    """Keywords, patterns, references, cycles and fan-out, over every subschema
    (the metaschema has checked each one)."""
    problems: list[str] = []
    nodes: list[tuple[str, dict[str, Any]]] = []  # every subschema, with its JSON pointer
    stack: list[tuple[str, Any]] = [("#", schema)]
    while stack:
        at, node = stack.pop()
        if not isinstance(node, dict):
            continue
        nodes.append((at, node))
        problems += [f"{at}: {kw} is not supported" for kw in REFUSED if kw in node]
        if at != "#" and "$id" in node:
            problems.append(f"{at}: $id is allowed only at the root")
        problems += _pattern_problems(at, node)
        if isinstance(node.get("enum"), list) and len(node["enum"]) > MAX_ENUM:
            problems.append(f"{at}/enum: {len(node['enum'])} values; at most {MAX_ENUM} "
                            "are allowed")
        for table in (IN_PLACE, DESCENDING, CONTAINERS):
            stack.extend((f"{at}/{suffix}", sub) for suffix, sub in _subschemas(node, table))

    resolver = Registry().resolver_with_root(DRAFT202012.create_resource(schema))
    where = {id(node): at for at, node in nodes}  # the nodes keep these ids valid
    in_place: dict[int, list[int]] = {}  # subschemas applied to the same value
    for at, node in nodes:
        applied = [v for _, v in _subschemas(node, IN_PLACE) if isinstance(v, dict)]
        if "$ref" in node:
            target = _ref_target(at, node["$ref"], resolver, where, problems)
            if isinstance(target, dict):
                applied.append(target)
        in_place[id(node)] = [id(v) for v in applied]
    if not problems:
        problems += _in_place_problems(in_place, where)
    return problems


def _ref_target(at: str, ref: Any, resolver: Any, schemas: dict[int, str],
                problems: list[str]) -> Any:
    """What `ref` points at: a subschema of the document (or a boolean), else None
    and a problem."""
    if not isinstance(ref, str) or not ref.startswith("#"):
        problems.append(f"{at}: $ref {str(ref)[:200]!r} is not local: a $ref starts with #, "
                        "and nothing is fetched")
        return None
    try:
        target = resolver.lookup(ref).contents
    except (Unresolvable, LookupError, ValueError, TypeError):  # a pointer into nothing
        problems.append(f"{at}: $ref {ref[:200]!r} does not resolve within the schema")
        return None
    if not isinstance(target, bool) and id(target) not in schemas:
        # e.g. `#/properties` (a map of names) or a keyword's value: not a checked schema
        problems.append(f"{at}: $ref {ref[:200]!r} does not point at a subschema")
        return None
    return target


def _in_place_problems(in_place: dict[int, list[int]], where: dict[int, str]) -> list[str]:
    """A cycle of subschemas applied to the same value, or too many of them on one value."""
    applied: dict[int, int] = {}  # id -> subschemas it applies to its value, itself included
    for start in in_place:
        if start in applied:
            continue
        path = [(start, iter(in_place[start]))]
        on_path = {start}
        while path:
            node, successors = path[-1]
            nxt = next(successors, None)
            if nxt is None:
                path.pop()
                on_path.discard(node)
                applied[node] = min(MAX_IN_PLACE + 1,
                                    1 + sum(applied[s] for s in in_place.get(node, ())))
                if applied[node] > MAX_IN_PLACE:
                    return [f"{where[node]}: applies more than {MAX_IN_PLACE} subschemas "
                            "to one value"]
            elif nxt in on_path:
                cycle = " -> ".join(where[n] for n, _ in path[[n for n, _ in path].index(nxt):])
                return [f"{cycle} -> {where[nxt]}: a $ref cycle that never descends into the "
                        "value (it would recurse forever)"]
            elif nxt not in applied:
                path.append((nxt, iter(in_place.get(nxt, ()))))
                on_path.add(nxt)
    return []


# --- regular expressions: RE2 only ------------------------------------------------

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False


@lru_cache(maxsize=4096)
def _regex(pattern: str) -> Any:
    return re2.compile(pattern, _RE2_OPTIONS)


def _search(pattern: str, text: str) -> bool:
    _charge(1 + len(text) // BYTES_PER_UNIT)
    try:
        return _regex(pattern).search(text) is not None
    except UnicodeEncodeError:
        # A lone surrogate (valid in JSON, not in UTF-8, which RE2 matches): as U+FFFD.
        text = text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
        return _regex(pattern).search(text) is not None


def _pattern_problems(at: str, node: dict[str, Any]) -> list[str]:
    patterns = [("pattern", node["pattern"])] if isinstance(node.get("pattern"), str) else []
    if isinstance(node.get("patternProperties"), dict):
        patterns += [("patternProperties", p) for p in node["patternProperties"]]
    problems = []
    for keyword, pattern in patterns:
        try:
            _regex(pattern)
        except (re2.error, UnicodeEncodeError) as exc:
            reason = exc.args[0] if isinstance(exc, re2.error) and exc.args else str(exc)
            if isinstance(reason, bytes):
                reason = reason.decode(errors="replace")
            problems.append(f"{at}/{keyword}: {pattern[:200]!r} is not a pattern RE2 accepts "
                            f"({reason}); backreferences and lookaround are not supported")
    return problems


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _search(pattern, instance):
        yield ValidationError(f"{_short(instance)} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: dict[str, Any], instance: Any,
                        schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, additional: Any, instance: Any,
                           schema: Any) -> Iterator[ValidationError]:
    """jsonschema's own, but the patternProperties it skips are matched with RE2."""
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras = [k for k in instance
              if k not in properties and not any(_search(p, k) for p in patterns)]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        names = ", ".join(_short(e) for e in sorted(extras)[:10])
        yield ValidationError(f"Additional properties are not allowed ({names} unexpected)")


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxdict, _REPR.maxlist, _REPR.maxstring, _REPR.maxother = 3, 6, 6, 60, 60


def _short(value: Any) -> str:
    """A value in a message: its first characters (never the repr of all of it)."""
    if isinstance(value, str) and len(value) > 80:
        return f"{value[:60]!r}... ({len(value)} chars)"
    return _REPR.repr(value)


# --- applying a schema ------------------------------------------------------------


class _TooCostly(Exception):
    pass


class _Run:
    """One validation's meter, and the canonical forms of the schema's `enum` and
    `const` values (kept with the cached validator, whose schema owns those values,
    so the ids stay valid)."""

    def __init__(self, memo: dict[tuple[str, int], Any]) -> None:
        self.left = MAX_EVALUATIONS
        self.memo = memo


_run: ContextVar[_Run | None] = ContextVar("tether_schema_run", default=None)


def _charge(units: int) -> None:
    run = _run.get()
    if run is not None:
        run.left -= units
        if run.left < 0:
            raise _TooCostly


def _width(value: Any) -> int:
    return len(value) if isinstance(value, list | dict) else 0


# What a keyword walks besides what it charges itself (RE2 searches, canonical
# JSON): the items or keys of the value it checks (each may descend into an
# empty schema, which costs jsonschema nothing to apply, yet is work), or the
# entries of its own schema value. Charged only for the type it applies to.
_WALKS_ITEMS = ("items", "contains")
_WALKS_KEYS = ("propertyNames", "additionalProperties")
_WALKS_ITS_VALUE: dict[str, type | None] = {
    "required": dict, "properties": dict, "dependentSchemas": dict, "prefixItems": list,
    "allOf": None, "anyOf": None, "oneOf": None, "type": None}


def _walked(keyword: str, value: Any, instance: Any) -> int:
    if keyword in _WALKS_ITEMS:
        return len(instance) if isinstance(instance, list) else 0
    if keyword in _WALKS_KEYS:
        return len(instance) if isinstance(instance, dict) else 0
    if keyword == "dependentRequired" and isinstance(value, dict) and isinstance(instance, dict):
        return len(value) + sum(_width(v) for v in value.values())
    if keyword in _WALKS_ITS_VALUE:
        applies_to = _WALKS_ITS_VALUE[keyword]
        return _width(value) if applies_to is None or isinstance(instance, applies_to) else 0
    return 0


def _canonical(value: Any) -> str:
    """`value` as canonical JSON, equal for values JSON Schema calls equal (an
    integral float is its integer; true is not 1). Charged by its length."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)
    if any(c in text for c in ".eE"):  # maybe a float: 1.0 must read as 1
        text = json.dumps(json.loads(text, parse_float=_number), sort_keys=True,
                          separators=(",", ":"))
    _charge(1 + len(text) // BYTES_PER_UNIT)
    return text


def _number(text: str) -> float | int:
    number = float(text)
    return int(number) if number.is_integer() else number


def _memo(keyword: str, value: Any, build: Callable[[], Any]) -> Any:
    """`build()`, once per value of the schema's `keyword` (of the cached validator)."""
    run = _run.get()
    if run is None:
        return build()
    key = (keyword, id(value))
    found = run.memo.get(key)
    if found is None:
        found = run.memo[key] = build()
    return found


def _enum(validator: Any, enums: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    allowed = _memo("enum", enums, lambda: frozenset(_canonical(e) for e in enums))
    if _canonical(instance) not in allowed:
        yield ValidationError(f"{_short(instance)} is not one of {_short(enums)}")


def _const(validator: Any, const: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if _canonical(instance) != _memo("const", const, lambda: _canonical(const)):
        yield ValidationError(f"{_short(const)} was expected")


def _unique_items(validator: Any, unique: Any, instance: Any,
                  schema: Any) -> Iterator[ValidationError]:
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: set[str] = set()
    for item in instance:  # one hash per item: linear, where jsonschema may go pairwise
        text = _canonical(item)
        if text in seen:
            yield ValidationError(f"{_short(instance)} has non-unique elements")
            return
        seen.add(text)


def _metered(keyword: str, check: Callable[..., Any]) -> Callable[..., Any]:
    def metered(validator: Any, value: Any, instance: Any,
                schema: Any) -> Iterator[ValidationError]:
        _charge(1 + _walked(keyword, value, instance))
        for error in check(validator, value, instance, schema) or ():
            if not getattr(error, "_tether_charged", False):
                # jsonschema's messages print the value: a cost like any other
                _charge(1 + len(error.message) // BYTES_PER_UNIT)
                error._tether_charged = True  # type: ignore[attr-defined]
            yield error

    return metered


TenantValidator: type[Validator] = validators.extend(Draft202012Validator, validators={
    keyword: _metered(keyword, check) for keyword, check in {
        **Draft202012Validator.VALIDATORS, "pattern": _pattern,
        "patternProperties": _pattern_properties, "additionalProperties": _additional_properties,
        "enum": _enum, "const": _const, "uniqueItems": _unique_items,
    }.items()
})


class _Compiled(NamedTuple):
    validator: Validator | None
    memo: dict[tuple[str, int], Any]
    problems: tuple[str, ...]


@lru_cache(maxsize=1024)
def _validator(key: str) -> _Compiled:
    """The validator of the schema whose canonical JSON is `key`, or why it is refused."""
    schema = json.loads(key)
    problems = check_schema(schema)
    if problems:
        return _Compiled(None, {}, tuple(problems))
    # nothing but the schema itself to resolve references in
    return _Compiled(TenantValidator(schema, registry=Registry()), {}, ())


def _larger_than(value: Any, limit: int) -> bool:
    """Whether `value`'s JSON is (about) more than `limit` characters, walking at
    most that much of it."""
    size, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            size += len(item) + 3
        elif isinstance(item, dict | list):
            size += 2 + 2 * len(item)
            if size <= limit:
                stack.extend(item)
                if isinstance(item, dict):
                    stack.extend(item.values())
        else:
            size += 5
        if size > limit:
            return True
    return False


def schema_errors(schema: dict[str, Any], instance: Any, *, limit: int = 10) -> list[str]:
    """Readable validation errors of `instance` against a tenant's `schema` (empty
    when valid; at most `limit`). Raises `SchemaRefused` for a stored schema the
    rules refuse."""
    if not schema:
        return []
    try:
        key = json.dumps(schema, sort_keys=True, separators=(",", ":"))
    except (RecursionError, ValueError, TypeError):
        raise SchemaRefused(["the schema is not storable JSON or is nested too deep"]) from None
    validator, memo, problems = _validator(key)
    if validator is None:
        raise SchemaRefused(list(problems))
    if _larger_than(instance, MAX_VALUE_BYTES):
        return [f"(root): the value is larger than {MAX_VALUE_BYTES} bytes of JSON, the most "
                "a schema is applied to"]
    token = _run.set(_Run(memo))
    try:
        errors = list(itertools.islice(validator.iter_errors(instance), limit))
    except _TooCostly:
        return [f"(root): validating this value took more than {MAX_EVALUATIONS} schema checks"]
    except RecursionError:
        return ["(root): the value is nested too deep to validate"]
    finally:
        _run.reset(token)
    errors.sort(key=lambda e: [(isinstance(p, str), p) for p in e.path])
    return [f"{'/'.join(map(str, e.path)) or '(root)'}: {e.message}"[:MAX_MESSAGE_CHARS]
            for e in errors]
