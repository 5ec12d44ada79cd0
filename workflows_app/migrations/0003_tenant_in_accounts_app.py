"""The tenant models moved to accounts_app: this app's foreign keys point there.

State only: the tables and their columns stay as they are."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts_app', '0001_initial'),
        ('workflows_app', '0002_workflow_published'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='workflow',
                    name='tenant',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='workflows', to='accounts_app.tenant'),
                ),
            ],
            database_operations=[],
        ),
    ]
