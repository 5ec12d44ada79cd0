"""The tenant models moved to accounts_app: this app's foreign keys point there.

State only: the tables and their columns stay as they are."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts_app', '0001_initial'),
        ('notify_app', '0005_event_without_constraint'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='delivery',
                    name='tenant',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='accounts_app.tenant'),
                ),
                migrations.AlterField(
                    model_name='notification',
                    name='tenant',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='accounts_app.tenant'),
                ),
                migrations.AlterField(
                    model_name='notificationsettings',
                    name='tenant',
                    field=models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='notification_settings', to='accounts_app.tenant'),
                ),
                migrations.AlterField(
                    model_name='slackmessage',
                    name='tenant',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='accounts_app.tenant'),
                ),
                migrations.AlterField(
                    model_name='webhooksubscription',
                    name='tenant',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='webhooks', to='accounts_app.tenant'),
                ),
            ],
            database_operations=[],
        ),
    ]
