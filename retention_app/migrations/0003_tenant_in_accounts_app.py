"""The tenant models moved to accounts_app: this app's foreign keys point there.

State only: the tables and their columns stay as they are."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts_app', '0001_initial'),
        ('retention_app', '0002_exports'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='archivedtask',
                    name='tenant',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='accounts_app.tenant'),
                ),
                migrations.AlterField(
                    model_name='archivefile',
                    name='tenant',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='archive_files', to='accounts_app.tenant'),
                ),
                migrations.AlterField(
                    model_name='export',
                    name='tenant',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='accounts_app.tenant'),
                ),
                migrations.AlterField(
                    model_name='retentionpolicy',
                    name='tenant',
                    field=models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='retention_policy', serialize=False, to='accounts_app.tenant'),
                ),
            ],
            database_operations=[],
        ),
    ]
