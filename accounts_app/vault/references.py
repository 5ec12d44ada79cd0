"""How tools and agent profiles name secrets, checked without reading a value.

- A secret's name: lower-case letters, digits, `_` and `-`, starting with a
  letter, at most 64 characters.
- An HTTP tool's `secret_headers` map a header to a template naming one or more
  secrets of the tool's tenant: ``{"Authorization": "Bearer {secret:payments}"}``.
  Braces appear only around ``{secret:NAME}``; a template must name a secret.
- An agent profile's model (and its fallback) names its key as a secret
  (`api_key_secret`) or, where the operator granted it, as an environment
  variable (`api_key_env`); never both.

A reference is written `secret:NAME` or `env:NAME` where values are looked up.
"""
from __future__ import annotations

import re
from typing import Any

SECRET_NAME = re.compile(r"[a-z][a-z0-9_-]{0,63}")
SECRET_NAME_RULE = "lower-case letters, digits, _ and -, starting with a letter (max 64)"
MAX_TEMPLATE_CHARS = 1024
_PLACEHOLDER = re.compile(r"\{secret:([^{}]*)\}")
EXAMPLE = "Bearer {secret:payments}"


def secret_ref(name: str) -> str:
    return f"secret:{name}"


def env_ref(name: str) -> str:
    return f"env:{name}"


def template_names(template: str) -> list[str]:
    """The secret names a header template refers to, in order."""
    return _PLACEHOLDER.findall(template)


def template_errors(template: Any) -> list[str]:
    """What is wrong with a header template (empty when it may be stored)."""
    if not isinstance(template, str) or not template:
        return [f"a template naming a secret, e.g. {EXAMPLE!r}"]
    if len(template) > MAX_TEMPLATE_CHARS:
        return [f"at most {MAX_TEMPLATE_CHARS} characters"]
    names = template_names(template)
    if not names:
        return [f"must name a secret of this tenant as {{secret:NAME}}, e.g. {EXAMPLE!r}"]
    errors = [f"{name!r} is not a secret name: {SECRET_NAME_RULE}"
              for name in names if not SECRET_NAME.fullmatch(name)]
    rest = _PLACEHOLDER.sub("", template)
    if "{" in rest or "}" in rest:
        errors.append("braces may only surround {secret:NAME}")
    if any(ord(c) < 32 or ord(c) == 127 for c in rest):
        errors.append("no control characters")
    return errors


def render(template: str, values: dict[str, str]) -> str:
    """The header value: each {secret:NAME} replaced by `values[NAME]`."""
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def header_secret_names(secret_headers: Any) -> set[str]:
    """Every secret a tool's `secret_headers` refer to."""
    if not isinstance(secret_headers, dict):
        return set()
    return {name for template in secret_headers.values() if isinstance(template, str)
            for name in template_names(template)}


def _targets(model: Any) -> list[tuple[str, dict[str, Any]]]:
    """(field prefix, settings) of the primary model and its fallback."""
    if not isinstance(model, dict):
        return []
    out: list[tuple[str, dict[str, Any]]] = [("", model)]
    if isinstance(model.get("fallback"), dict):
        out.append(("fallback.", model["fallback"]))
    return out


def model_secret_names(model: Any) -> dict[str, str]:
    """{field: secret name} of a profile's `model` (`api_key_secret`, `fallback.api_key_secret`)."""
    return {f"{prefix}api_key_secret": target["api_key_secret"]
            for prefix, target in _targets(model)
            if isinstance(target.get("api_key_secret"), str) and target["api_key_secret"]}


def model_env_names(model: Any) -> dict[str, str]:
    """{field: variable name} of a profile's `model` (`api_key_env`, `fallback.api_key_env`)."""
    return {f"{prefix}api_key_env": target["api_key_env"]
            for prefix, target in _targets(model)
            if isinstance(target.get("api_key_env"), str) and target["api_key_env"]}
