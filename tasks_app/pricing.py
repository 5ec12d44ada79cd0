"""Money: model prices, token usage, what a model call costs, and cost budgets.

Invariants:
- money is never a float. Prices and budgets are decimal dollars, given as JSON
  numbers or strings with at most `PLACES` decimal places; amounts are stored
  as integers of pico-dollars (1e-12 USD), so a price per million tokens times
  a token count is always a whole number: sums are exact on PostgreSQL and
  SQLite alike;
- a profile's `model.prices` (and its fallback's) is
  `{input_per_mtok, output_per_mtok, cached_input_per_mtok?}`, dollars per
  million tokens; cached input tokens are part of the input tokens (OpenAI's
  `usage.prompt_tokens_details.cached_tokens`) and cost `cached_input_per_mtok`
  (the input price when not given);
- a model without prices costs 0: its tokens are still counted.

Pure functions only: the gateway, the services and the runner share them.
"""
from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

PICO = 10**12  # pico-dollars per dollar
TOKENS_PER_PRICE = 10**6  # prices are per million tokens
PLACES = 6
MAX_PRICE = Decimal(100_000)  # dollars per million tokens
MAX_BUDGET = Decimal(10_000_000)  # dollars, one task's max_cost
PRICE_KEYS = ("input_per_mtok", "output_per_mtok", "cached_input_per_mtok")
REQUIRED_PRICE_KEYS = ("input_per_mtok", "output_per_mtok")


def money(value: Any) -> Decimal | None:
    """A non-negative amount of dollars with at most `PLACES` decimal places, from
    a JSON number or string; None when `value` is not one."""
    if isinstance(value, bool) or not isinstance(value, int | float | str | Decimal):
        return None
    if isinstance(value, str) and not 0 < len(value) <= 40:
        return None
    try:
        amount = Decimal(str(value)) if isinstance(value, float) else Decimal(value)
    except (InvalidOperation, ValueError):
        return None
    if not amount.is_finite() or amount < 0:
        return None
    try:
        if amount != amount.quantize(Decimal(1).scaleb(-PLACES)):
            return None  # more decimal places than a price or a budget may have
    except InvalidOperation:  # too many digits to quantize: far out of bounds anyway
        return None
    return amount


def money_problem(value: Any, *, maximum: Decimal) -> str | None:
    """Why `value` is not an amount from 0 to `maximum` dollars (None: it is)."""
    amount = money(value)
    if amount is None or amount > maximum:
        return (f"a decimal number of dollars from 0 to {maximum:,}, "
                f"at most {PLACES} decimal places")
    return None


def to_pico(dollars: Decimal) -> int:
    return int(dollars * PICO)


def pico_text(pico: int) -> str:
    """Pico-dollars as exact dollars, at least two decimal places: "0.00", "1.25",
    "0.0000123"."""
    text = format((Decimal(pico) / PICO).normalize(), "f")
    whole, _, fraction = text.partition(".")
    return f"{whole}.{fraction.ljust(2, '0')}"


def money_text(dollars: Decimal) -> str:
    """The canonical text of an amount: "5", "0.5" (what profiles and versions store)."""
    return format(dollars.normalize(), "f") if dollars else "0"


@dataclass(frozen=True)
class TokenUsage:
    """One model call's tokens, as the reply's `usage` reported them."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0

    @classmethod
    def from_openai(cls, usage: Any) -> TokenUsage:
        """From an OpenAI-shaped `usage` (a server may send anything: junk is 0)."""
        usage = usage if isinstance(usage, dict) else {}
        details = usage.get("prompt_tokens_details")
        cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else 0
        prompt = _count(usage.get("prompt_tokens"))
        return cls(input_tokens=prompt, output_tokens=_count(usage.get("completion_tokens")),
                   cached_input_tokens=min(cached, prompt))


def _count(value: Any) -> int:
    if isinstance(value, bool):
        return 0
    try:
        return max(0, min(int(value or 0), 2**40))
    except (TypeError, ValueError, OverflowError):
        return 0


@dataclass(frozen=True)
class Prices:
    """Dollars per million tokens."""

    input_per_mtok: Decimal
    output_per_mtok: Decimal
    cached_input_per_mtok: Decimal | None = None

    def cost_pico(self, usage: TokenUsage) -> int:
        cached = min(usage.cached_input_tokens, usage.input_tokens)
        cached_price = (self.input_per_mtok if self.cached_input_per_mtok is None
                        else self.cached_input_per_mtok)
        dollars_x_mtok = ((usage.input_tokens - cached) * self.input_per_mtok
                          + cached * cached_price + usage.output_tokens * self.output_per_mtok)
        # exact: prices have at most PLACES (6) decimals, and PICO / 10**6 = 10**6
        return int(dollars_x_mtok * (PICO // TOKENS_PER_PRICE))


def prices_of(model: dict[str, Any], *, fallback: bool = False) -> Prices | None:
    """The prices of a profile's model (or of its fallback), None when it has none."""
    target = model.get("fallback") if fallback else model
    raw = target.get("prices") if isinstance(target, dict) else None
    if not isinstance(raw, dict) or prices_errors(raw):
        return None
    amounts = {key: money(raw.get(key)) for key in PRICE_KEYS if raw.get(key) is not None}
    return Prices(**amounts)  # type: ignore[arg-type]


def prices_errors(raw: Any, prefix: str = "prices") -> dict[str, list[str]]:
    """Field errors of a `prices` object (empty when it is valid)."""
    if not isinstance(raw, dict):
        return {prefix: ["an object {input_per_mtok, output_per_mtok, cached_input_per_mtok?} "
                         "in dollars per million tokens"]}
    errors: dict[str, list[str]] = {}
    for key in raw:
        if key not in PRICE_KEYS:
            errors.setdefault(f"{prefix}.{key}", []).append(
                f"unknown price; one of {', '.join(PRICE_KEYS)}")
    for key in PRICE_KEYS:
        if raw.get(key) is None:
            if key in REQUIRED_PRICE_KEYS:
                errors.setdefault(f"{prefix}.{key}", []).append("required")
            continue
        if problem := money_problem(raw[key], maximum=MAX_PRICE):
            errors.setdefault(f"{prefix}.{key}", []).append(problem)
    return errors
