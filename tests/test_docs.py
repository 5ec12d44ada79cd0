"""The documentation site builds with `mkdocs build --strict` (no broken link, no
missing page or anchor), and its generated reference pages say what the code
says: every transition of the task state machine, every status of the step
machine, every API operation of the OpenAPI schema, every runtime setting and
every management command.

The build runs in a process of its own (the hook sets Django up with
`config.settings` there); this test touches no database.
"""

from __future__ import annotations

import html
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.apps import apps
from django.conf import settings
from django.core.management import get_commands
from drf_spectacular.generators import SchemaGenerator

from tasks_app.machine import TRANSITIONS
from tasks_app.store.steps import STEP_TRANSITIONS

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.system  # mkdocs builds in a process of its own


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    env.pop("DJANGO_SETTINGS_MODULE", None)  # the hook's own: config.settings
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    return out


def page(site: Path, name: str) -> str:
    return html.unescape((site / name / "index.html").read_text())


def test_the_site_builds_strict_with_every_page(site: Path) -> None:
    for name in ("tutorial", "how-to/workflows", "how-to/console", "reference/settings",
                 "explanation/architecture", "performance", "performance/history"):
        assert (site / name / "index.html").is_file(), name


def test_the_state_machine_pages_name_every_transition_and_status(site: Path) -> None:
    machines = page(site, "reference/state-machines")
    events = page(site, "reference/events")
    for event, (_sources, target) in TRANSITIONS.items():
        assert f"<code>{event}</code>" in machines, event
        assert f"<code>{event}</code>" in events, event
        assert f"<code>{target}</code>" in machines
    for status in STEP_TRANSITIONS:
        assert f"<code>{status}</code>" in machines, status


def test_the_api_page_lists_every_operation_of_the_schema(site: Path) -> None:
    api = page(site, "reference/api")
    schema = SchemaGenerator().get_schema(request=None, public=True)
    operations = [(method.upper(), path) for path, ops in schema["paths"].items()
                  for method in ops if method != "parameters"]
    assert len(operations) > 40
    for method, path in operations:
        assert f"<code>{method} {path}</code>" in api, (method, path)
    for name in schema["components"]["schemas"]:
        assert f'id="{name.lower()}"' in api, name


def test_the_settings_page_names_every_runtime_setting(site: Path) -> None:
    reference = page(site, "reference/settings")
    for key in settings.TETHER:
        assert f"TETHER_{key}" in reference, key
    assert "TETHER_SECRETS_KEY" in reference
    assert "AAAAAAAA" not in reference  # the hook's throwaway key is never shown


def test_the_commands_page_documents_every_command(site: Path) -> None:
    commands = page(site, "reference/commands")
    product = {app.name for app in apps.get_app_configs()  # the test suite's own app aside
               if Path(app.path).is_relative_to(ROOT) and app.name != "tests"}
    ours = [name for name, app in get_commands().items() if app in product]
    assert "drill" in ours
    for name in [*ours, "bench"]:
        assert f"<code>{name}</code>" in commands, name
    assert "<code>--start-workers</code>" in commands
