from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('tasks_app', '0019_summary_fact_check'),
    ]

    operations = [
        migrations.AddField(
            model_name='task',
            name='shadow_of',
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='task',
            name='shadow_live_reads',
            field=models.BooleanField(db_default=False, default=False),
        ),
        migrations.AddIndex(
            model_name='task',
            index=models.Index(condition=models.Q(('shadow_of__isnull', False)),
                               fields=['shadow_of'], name='task_shadow_of'),
        ),
        migrations.AddField(
            model_name='agentprofile',
            name='release_gate',
            field=models.JSONField(blank=True, db_default={}, default=dict),
        ),
    ]
