"""The tenant models moved to accounts_app: tasks_app's foreign keys point there.

State only: the tables and their columns stay as they are."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts_app', '0001_initial'),
        ('tasks_app', '0025_event_partitions'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='task',
                    name='api_key',
                    field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='accounts_app.apikey'),
                ),
                migrations.AlterField(
                    model_name='task',
                    name='tenant',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='tasks', to='accounts_app.tenant'),
                ),
                migrations.AlterField(
                    model_name='payloadblob',
                    name='tenant',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='accounts_app.tenant'),
                ),
                migrations.AlterField(
                    model_name='dailyspend',
                    name='tenant',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='accounts_app.tenant'),
                ),
                migrations.AlterField(
                    model_name='event',
                    name='tenant',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='accounts_app.tenant'),
                ),
                migrations.AlterField(
                    model_name='agentprofile',
                    name='tenant',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='agents', to='accounts_app.tenant'),
                ),
            ],
            database_operations=[],
        ),
    ]
