"""The pure parts of the vault: header templates, grants and redaction."""
from __future__ import annotations

import pytest

from accounts_app.vault.grants import env_granted
from accounts_app.vault.references import render, template_errors
from accounts_app.vault.values import MASK, Resolved, Unresolved, redact


@pytest.mark.parametrize("template", [
    "{secret:payments}", "Bearer {secret:payments}", "{secret:user}:{secret:pass-2}",
])
def test_a_template_names_secrets(template):
    assert template_errors(template) == []


@pytest.mark.parametrize("template", [
    "", "Bearer sk-live-123", "SECRET_KEY", "{secret:}", "{secret:Upper}", "{secret:a b}",
    "Bearer {secret:x", "{secret:x}}", "{env:HOME}", "a\r\nX-Injected: 1 {secret:x}", 12,
    "{secret:x}" + "y" * 2000,
])
def test_anything_else_is_refused(template):
    assert template_errors(template)


def test_render_fills_every_placeholder():
    assert render("{secret:u}:{secret:p}@{secret:u}", {"u": "ann", "p": "pw"}) == "ann:pw@ann"


@pytest.mark.parametrize(("grants", "name", "tenant", "granted"), [
    (("OLLAMA",), "OLLAMA", "acme", True),
    (("acme:OPENAI",), "OPENAI", "acme", True),
    (("acme:OPENAI",), "OPENAI", "other", False),
    ((" OLLAMA ",), "OLLAMA", "acme", True),
    ((), "HOME", "acme", False),
    (("SECRET_KEY", "acme:DATABASE_URL"), "SECRET_KEY", "acme", False),
    (("acme:DATABASE_URL",), "DATABASE_URL", "acme", False),
])
def test_only_granted_variables_are_usable(settings, grants, name, tenant, granted):
    settings.TETHER_ENV_GRANTS = grants
    assert env_granted(name, tenant=tenant) is granted


def test_redaction_masks_values_in_text_keys_and_nested_values():
    data = {"echo": "Bearer sk-1", "sk-1": ["x", {"deep": "sk-1sk-1"}], "n": 3}
    assert redact(data, ["sk-1"]) == {"echo": f"Bearer {MASK}", MASK: ["x", {"deep": MASK * 2}],
                                      "n": 3}
    assert redact('quote " and sk-1', ["sk-1"]) == f'quote " and {MASK}'
    assert redact({"k": 'a"b\\c'}, ['a"b\\c']) == {"k": MASK}  # JSON-escaped in the text
    assert redact({"k": "clean"}, ["sk-1"]) == {"k": "clean"}


def test_a_value_that_cannot_be_cut_out_withholds_the_whole_answer():
    assert redact({"pin": 12345}, ["12345"])["type"] == "redacted"


def test_resolved_never_shows_its_values():
    resolved = Resolved(values={"secret:a": "sk-hidden"}, problems={"secret:b": "b is missing"})
    assert "sk-hidden" not in repr(resolved)
    assert resolved.get("secret:a") == "sk-hidden"
    with pytest.raises(Unresolved, match="b is missing"):
        resolved.get("secret:b")
