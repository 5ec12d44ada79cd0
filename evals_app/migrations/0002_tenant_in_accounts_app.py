"""The tenant models moved to accounts_app: this app's foreign keys point there.

State only: the tables and their columns stay as they are."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts_app', '0001_initial'),
        ('evals_app', '0001_evaluations'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='evaluation',
                    name='tenant',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='accounts_app.tenant'),
                ),
            ],
            database_operations=[],
        ),
    ]
