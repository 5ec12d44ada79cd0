"""The facts a summary must not lose, and the check that it did not.

When older steps are folded into a summary (`context.summaries`), the facts
that must survive are read from the originals (the steps' arguments, outputs,
errors, questions and answers, in full, not the truncated views), with
regular expressions, deterministically: the same steps always give the same
facts, in the same order.

Kinds (`KINDS`):

- ``amount``: a number with a currency (``50 EUR``, ``€12.50``, ``USD 1,200``);
- ``quantity``: a number with a unit (``3 kg``, ``48 hours``, ``15%``);
- ``date``: ISO dates and times, ``12/03/2026``, ``3 March 2026``, ``March 3``,
  clock times (``14:30``, ``9 am``);
- ``identifier``: a token mixing letters and digits (``A-10432``, ``INV2026-77``),
  ``#1234``, or a run of 5 digits or more;
- ``name``: two or more capitalised words in a row (``Maria Lopez``);
- ``negation``, ``permission``, ``open_item``: the clause (up to a sentence
  end, ``;`` or a line break) holding a negation (``not``, ``never``, ``do
  not``...), an approval or permission condition (``only if``, ``unless``,
  ``approval``...) or something unfinished (``pending``, ``still to``,
  ``TODO``...), kept verbatim.

A fact is kept by a text when the text holds it after both are normalised
(case, spacing, quotes, JSON escapes). A clause is kept too when one line of
the text holds a negation (for a negation) and every significant word of the
clause (numbers, identifiers, words of 4 letters or more): a summary may
rephrase around a clause, never drop its terms or its "not".
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

KINDS = ("amount", "quantity", "date", "identifier", "name", "negation", "permission",
         "open_item")
CLAUSE_KINDS = frozenset({"negation", "permission", "open_item"})
MAX_CLAUSE_CHARS = 240
MAX_TEXT_CHARS = 20_000  # of one step's originals: a huge tool output is read this far
MAX_FACTS_PER_STEP = 30

_CURRENCY = r"(?:EUR|USD|GBP|CHF|JPY|CAD|AUD|SEK|NOK|DKK|PLN|INR|CNY|euros?|dollars?|pounds?)"
_SYMBOL = r"[€$£¥]"
_NUMBER = r"\d+(?:[.,]\d+)*"
_UNIT = (r"(?:kg|g|mg|t|km|m|cm|mm|mi|ft|in|l|ml|%|percent|h|hrs?|hours?|min|minutes?|"
         r"s|secs?|seconds?|days?|weeks?|months?|years?|items?|units?|pcs|pieces?|boxes|"
         r"nights?|seats?|tickets?|users?|kb|mb|gb|tb|kw|kwh|°c|°f)")
_MONTH = (r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|"
          r"Aug(?:ust)?|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)")

_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("amount", re.compile(
        rf"(?:{_SYMBOL}\s?{_NUMBER}|\b{_CURRENCY}\s?{_NUMBER}\b|\b{_NUMBER}\s?{_SYMBOL}"
        rf"|\b{_NUMBER}\s?{_CURRENCY}\b)", re.IGNORECASE)),
    ("date", re.compile(
        r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?)?\b"
        r"|\b\d{1,2}/\d{1,2}/\d{2,4}\b"
        rf"|\b\d{{1,2}}(?:st|nd|rd|th)?\s+{_MONTH}\.?(?:\s+\d{{4}})?\b"
        rf"|\b{_MONTH}\.?\s+\d{{1,2}}(?:st|nd|rd|th)?(?:,?\s+\d{{4}})?\b"
        r"|\b\d{1,2}:\d{2}(?:\s?[ap]\.?m\.?)?\b|\b\d{1,2}\s?[ap]\.?m\.?(?=\W|$)")),
    ("quantity", re.compile(rf"\b{_NUMBER}\s?{_UNIT}(?![\w-])", re.IGNORECASE)),
    ("identifier", re.compile(
        r"#\d{3,}\b"
        r"|\b(?=[A-Za-z0-9_/#-]*\d)(?=[A-Za-z0-9_/#-]*[A-Za-z])[A-Za-z0-9][A-Za-z0-9_/#-]{2,}"
        r"[A-Za-z0-9]\b"
        r"|\b\d{5,}\b")),
    ("name", re.compile(r"\b[A-Z][a-z]+(?:[ '-](?:van |de |von )?[A-Z][a-z]+)+\b")),
)
_NEGATION = re.compile(
    r"\b(?:not|never|no longer|nothing|none|nobody|cannot|can't|don't|doesn't|didn't|won't|"
    r"wouldn't|shouldn't|mustn't|isn't|aren't|wasn't|weren't|must not|do not|does not|"
    r"no)\b", re.IGNORECASE)
_PERMISSION = re.compile(
    r"\b(?:approv\w*|permission|permitted|allowed|authori[sz]\w*|consent\w*|only if|unless|"
    r"sign[- ]off|may only|requires?|needs? (?:a|an|the)? ?(?:ok|okay|go-ahead))\b",
    re.IGNORECASE)
_OPEN = re.compile(
    r"\b(?:todo|to do|pending|unfinished|not yet|still (?:need|needs|to|open|waiting)|"
    r"remaining|outstanding|follow[- ]up|open item|awaiting|waiting for|to be done|"
    r"left to do|next step)\b", re.IGNORECASE)
_CLAUSE_END = re.compile(r"(?<=[.!?:])\s+|[;\n]+")
# Words a clause's check does not need: connectives, not its terms.
_COMMON = frozenset({
    "that", "than", "this", "then", "with", "from", "have", "been", "were", "will", "would",
    "should", "could", "must", "there", "their", "they", "them", "what", "when", "where",
    "which", "while", "your", "yours", "into", "onto", "over", "under", "only", "also", "just",
    "more", "most", "less", "very", "such", "some", "each", "every", "about", "after", "before",
    "because", "being", "does", "done", "here",
})
_WORD = re.compile(r"[a-z0-9€$£¥%#/_-]+")
_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})")
_NAME_STOP = frozenset({"The", "This", "That", "These", "Those", "Step", "Steps", "Task", "Goal",
                        "Input", "Previous", "New", "Notes", "Summary"})


@dataclass(frozen=True)
class Fact:
    """A must-survive fact: its text as it stands in the original, its kind,
    and where it came from (the step, and that step's event ids)."""

    text: str
    kind: str
    step_no: int | None = None
    event_ids: tuple[int, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"text": self.text, "kind": self.kind, "step_no": self.step_no,
                "event_ids": list(self.event_ids)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Fact:
        return cls(text=str(data.get("text", "")), kind=str(data.get("kind", "")),
                   step_no=data.get("step_no"),
                   event_ids=tuple(int(i) for i in data.get("event_ids") or ()))


# --- extracting ---------------------------------------------------------------------------


def facts_in(text: str) -> list[tuple[str, str]]:
    """The (kind, text) facts of one text, in order of appearance, each once."""
    found: list[tuple[int, str, str]] = []
    taken: list[tuple[int, int]] = []
    for kind, pattern in _PATTERNS:
        for match in pattern.finditer(text):
            start, end = match.span()
            value = match.group(0).strip()
            if kind == "name" and value.split()[0] in _NAME_STOP and len(value.split()) == 2:
                continue
            if any(s <= start and end <= e for s, e in taken):
                continue  # inside an amount or a date already taken ("50" of "50 EUR")
            taken.append((start, end))
            found.append((start, kind, value))
    offset = 0
    for clause in _CLAUSE_END.split(text):
        start = text.find(clause, offset)
        offset = max(offset, start)
        clause = clause.strip().strip(",").strip()
        for kind, cue in (("negation", _NEGATION), ("permission", _PERMISSION),
                          ("open_item", _OPEN)):
            if clause and cue.search(clause):
                found.append((max(start, 0), kind, clause[:MAX_CLAUSE_CHARS]))
                break  # one clause, one fact: its first kind
    found.sort(key=lambda f: f[0])
    seen: set[str] = set()
    out: list[tuple[str, str]] = []
    for _, kind, value in found:
        key = normalise(value)
        if key and key not in seen:
            seen.add(key)
            out.append((kind, value))
    return out


def strings_of(value: Any) -> Iterator[str]:
    """The text in a JSON value: its strings, and its integers (a long one is an
    identifier), keys left out (they name fields, they are not facts)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, int) and not isinstance(value, bool):
        yield str(value)
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings_of(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from strings_of(item)


def step_facts(texts: Iterable[str], *, step_no: int | None,
               event_ids: tuple[int, ...] = ()) -> list[Fact]:
    """The facts of one step's originals (at most `MAX_FACTS_PER_STEP`, the first ones)."""
    facts: list[Fact] = []
    seen: set[str] = set()
    used = 0
    for text in texts:
        if used >= MAX_TEXT_CHARS:
            break
        text = text[: MAX_TEXT_CHARS - used]
        used += len(text)
        for kind, value in facts_in(text):
            key = normalise(value)
            if key in seen:
                continue
            seen.add(key)
            facts.append(Fact(text=value, kind=kind, step_no=step_no, event_ids=event_ids))
            if len(facts) >= MAX_FACTS_PER_STEP:
                return facts
    return facts


# --- checking -----------------------------------------------------------------------------


def normalise(text: str) -> str:
    text = _ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), text)
    text = (text.replace('\\"', '"').replace("\u2019", "'").replace("\u2018", "'")
            .replace("\u201c", '"').replace("\u201d", '"'))
    return " ".join(text.casefold().split())


def _terms(text: str) -> set[str]:
    words = _WORD.findall(normalise(text))
    return {w for w in words if any(c.isdigit() for c in w)
            or (len(w) >= 4 and w not in _COMMON)}


def is_kept(fact: Fact, haystack: str, lines: list[str]) -> bool:
    """Whether `haystack` (normalised, `lines` its normalised lines) holds `fact`."""
    if normalise(fact.text) in haystack:
        return True
    if fact.kind not in CLAUSE_KINDS:
        return False
    terms = _terms(fact.text)
    for line in lines:
        if fact.kind == "negation" and not _NEGATION.search(line):
            continue
        words = set(_WORD.findall(line))
        if terms <= words:
            return True
    return False


def missing(facts: Iterable[Fact], *texts: str) -> list[Fact]:
    """The facts none of `texts` (the summary, the facts already pinned) keeps."""
    joined = "\n".join(texts)
    haystack = normalise(joined)
    lines = [normalise(line) for line in joined.splitlines() if line.strip()]
    return [f for f in facts if not is_kept(f, haystack, lines)]


def pinned_text(fact: dict[str, Any]) -> str:
    """A pinned fact as the model reads it: verbatim, with where it came from."""
    where = []
    if fact.get("step_no"):
        where.append(f"step:{fact['step_no']}")
    where.extend(f"event:{i}" for i in fact.get("event_ids") or ())
    source = f" (from {', '.join(where)})" if where else ""
    return f"Kept verbatim{source}: {fact['text']}"


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)
