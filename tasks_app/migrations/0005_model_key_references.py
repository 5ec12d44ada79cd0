"""Agent profiles (and unfinished tasks' snapshots) stop reading arbitrary
environment variables.

`model.api_key_env` (and `model.fallback.api_key_env`) is kept only where the
operator grants that variable to the tenant in TETHER_ENV_GRANTS when this
migration runs. Any other becomes `api_key_secret` naming a tenant secret
derived from the variable's name (OPENAI_API_KEY -> openai_api_key). No value
is copied from the environment: until a tenant admin stores that secret
(POST /api/v1/secrets or the console's Secrets page), calls of that agent fail
with an error naming the missing secret. Finished tasks are left as they are
(they make no more calls). Each conversion is printed.
"""
import re

from django.conf import settings
from django.db import migrations

NEVER_GRANTED = {"SECRET_KEY", "TETHER_SECRETS_KEY", "DATABASE_URL", "CELERY_BROKER_URL",
                 "CHANNEL_LAYER_URL", "CACHE_URL"}
UNFINISHED = ["CREATED", "RUNNING", "WAITING_FOR_INPUT", "WAITING_FOR_APPROVAL",
              "WAITING_FOR_RECONCILIATION", "WAITING_FOR_HUMAN"]


def secret_name(variable):
    name = re.sub(r"[^a-z0-9_-]", "_", variable.lower())[:64]
    return name if re.fullmatch(r"[a-z][a-z0-9_-]{0,63}", name) else ("s_" + name)[:64]


# A copy of tasks_app.vault.grants.env_granted as of this migration: a
# migration keeps the behaviour it was written with.
def granted(variable, tenant):
    if variable in NEVER_GRANTED:
        return False
    for entry in getattr(settings, "TETHER_ENV_GRANTS", ()):
        scope, _, name = str(entry).strip().rpartition(":")
        if name == variable and scope in ("", tenant):
            return True
    return False


def convert(model, tenant, where):
    """Convert the model's non-granted env references in place; whether it changed."""
    if not isinstance(model, dict):
        return False
    changed = False
    targets = [("model", model)]
    if isinstance(model.get("fallback"), dict):
        targets.append(("model.fallback", model["fallback"]))
    for label, target in targets:
        variable = target.get("api_key_env")
        if not isinstance(variable, str) or not variable or granted(variable, tenant):
            continue
        del target["api_key_env"]
        target.setdefault("api_key_secret", secret_name(variable))
        print(f"\n  {where}: {label}.api_key_env {variable} -> api_key_secret "
              f"{target['api_key_secret']} (a tenant admin must store this secret)")
        changed = True
    return changed


def forwards(apps, schema_editor):
    AgentProfile = apps.get_model("tasks_app", "AgentProfile")
    Task = apps.get_model("tasks_app", "Task")
    for agent in AgentProfile.objects.select_related("tenant").iterator():
        if convert(agent.model, agent.tenant.name, f"agent {agent.tenant.name}/{agent.name}"):
            agent.save(update_fields=["model"])
    tasks = Task.objects.filter(status__in=UNFINISHED).select_related("tenant")
    for task in tasks.only("id", "agent_snapshot", "tenant__name").iterator():
        snapshot = task.agent_snapshot or {}
        if convert(snapshot.get("model"), task.tenant.name, f"task {task.pk}"):
            task.save(update_fields=["agent_snapshot"])


class Migration(migrations.Migration):

    dependencies = [
        ("tasks_app", "0004_tenant_secrets"),
    ]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
