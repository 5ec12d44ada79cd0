"""Tenants, memberships, API keys, tenant secrets and quotas leave tasks_app's
state, now that accounts_app holds them and every foreign key points there.

State only: their tables (`tasks_app_tenant`, ...) are accounts_app's now."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('accounts_app', '0001_initial'),
        ('approvals_app', '0005_tenant_in_accounts_app'),
        ('audit_app', '0002_tenant_in_accounts_app'),
        ('evals_app', '0002_tenant_in_accounts_app'),
        ('memory_app', '0003_tenant_in_accounts_app'),
        ('notify_app', '0006_tenant_in_accounts_app'),
        ('retention_app', '0003_tenant_in_accounts_app'),
        ('schedules_app', '0002_tenant_in_accounts_app'),
        ('tasks_app', '0026_tenant_in_accounts_app'),
        ('tools_app', '0010_tenant_in_accounts_app'),
        ('workflows_app', '0003_tenant_in_accounts_app'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveField(
                    model_name='membership',
                    name='tenant',
                ),
                migrations.RemoveField(
                    model_name='membership',
                    name='user',
                ),
                migrations.RemoveField(
                    model_name='tenantquota',
                    name='tenant',
                ),
                migrations.RemoveField(
                    model_name='tenantsecret',
                    name='tenant',
                ),
                migrations.DeleteModel(
                    name='ApiKey',
                ),
                migrations.DeleteModel(
                    name='Membership',
                ),
                migrations.DeleteModel(
                    name='TenantQuota',
                ),
                migrations.DeleteModel(
                    name='Tenant',
                ),
                migrations.DeleteModel(
                    name='TenantSecret',
                ),
            ],
            database_operations=[],
        ),
    ]
