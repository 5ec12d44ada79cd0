"""The ids of a context's items, read back from what a decision cites.

The context builder names its items `goal`, `input`, `result_schema`,
`step:<step no>`, `summary:v<version>`, `answer:<question id>` and
`approval:<approval id>`, and memory items `mem:<item id>@<version>` (read as
kind "mem", the item's id as its number, the version as `version`); a
decision cites them. A cite is text the model
wrote: `parse_cite` reads one without trusting it (any string, any digits, any
length) and never raises.
"""

from __future__ import annotations

from dataclasses import dataclass

from foundations.ids import parse_id

PLAIN = frozenset({"goal", "input", "result_schema"})
# kind -> the prefix of its number ("summary:v2"; "summary:2" is read too)
NUMBERED = {"step": "", "summary": "v", "answer": "", "approval": ""}


@dataclass(frozen=True)
class Cite:
    """`kind` is one of PLAIN or NUMBERED, or "" for anything else; `number` is
    the id of a numbered kind (None for plain kinds and for unknown cites)."""

    kind: str
    number: int | None = None
    version: int | None = None  # a memory item's (`mem:<id>@<version>`)


UNKNOWN = Cite("")


def parse_cite(ref: str) -> Cite:
    if ref in PLAIN:
        return Cite(ref)
    if ref.startswith("mem:"):
        ident, at, version = ref[4:].partition("@")
        item, number = parse_id(ident), parse_id(version) if at else None
        return UNKNOWN if item is None or number is None else Cite("mem", item, number)
    kind, colon, ident = ref.partition(":")
    prefix = NUMBERED.get(kind)
    if not colon or prefix is None:
        return UNKNOWN
    number = parse_id(ident.removeprefix(prefix) if prefix else ident)
    return UNKNOWN if number is None else Cite(kind, number)
