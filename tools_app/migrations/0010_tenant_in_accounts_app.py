"""The tenant models moved to accounts_app: this app's foreign keys point there.

State only: the tables and their columns stay as they are."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts_app', '0001_initial'),
        ('tools_app', '0009_tool_rate_limit'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='mcpserver',
                    name='tenant',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='mcp_servers', to='accounts_app.tenant'),
                ),
                migrations.AlterField(
                    model_name='tool',
                    name='tenant',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='tools', to='accounts_app.tenant'),
                ),
            ],
            database_operations=[],
        ),
    ]
