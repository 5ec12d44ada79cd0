"""Version 1 for every profile that exists: its configuration as it stands,
current. Tasks submitted before keep `agent_version` null: their snapshots
may predate this configuration."""

from django.db import migrations


def version_one(apps, schema_editor):  # type: ignore[no-untyped-def]
    # The live model builds the snapshot, so the rule of what a version holds is
    # written once (`AgentProfile.snapshot`); only the row's stored fields are read.
    from tasks_app.models.agents import AgentProfile as Live
    from tasks_app.services.agent_versions import config_diff

    Profile = apps.get_model("tasks_app", "AgentProfile")
    Version = apps.get_model("tasks_app", "AgentVersion")
    names = {f.attname for f in Profile._meta.concrete_fields}
    for row in Profile.objects.filter(current_version=0).iterator():
        live = Live(**{f.attname: getattr(row, f.attname) for f in Live._meta.concrete_fields
                       if f.attname in names})
        config = live.snapshot()
        Version.objects.create(
            agent_id=row.pk, number=1, config=config, kind="imported", actor="migration",
            actor_role="system",
            diff=config_diff(None, config),
        )
        Profile.objects.filter(pk=row.pk).update(current_version=1, latest_version=1)


class Migration(migrations.Migration):
    dependencies = [("tasks_app", "0007_agent_versions")]
    operations = [migrations.RunPython(version_one, migrations.RunPython.noop)]
