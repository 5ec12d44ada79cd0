"""Tenants, memberships, API keys, tenant secrets and quotas, as tasks_app
created them (its migrations 0001 to 0025 made their tables, which keep their
names): this app takes them over in the migration state only, no table is
created, copied or renamed. Their content types follow them (`app_label`
tasks_app -> accounts_app), so admin permissions keep pointing at them.
"""

import django.core.validators
import django.db.models.deletion
from decimal import Decimal
from django.conf import settings
from django.db import migrations, models

MOVED = ("tenant", "membership", "apikey", "tenantsecret", "tenantquota")


def _relabel(apps, schema_editor, *, old, new):
    """The moved models' content types, from app `old` to app `new` (a row the
    new app already has is left alone: post_migrate made it on a fresh database)."""
    ContentType = apps.get_model("contenttypes", "ContentType")
    db = schema_editor.connection.alias
    taken = set(ContentType.objects.using(db).filter(app_label=new, model__in=MOVED)
                .values_list("model", flat=True))
    (ContentType.objects.using(db).filter(app_label=old, model__in=MOVED)
     .exclude(model__in=taken).update(app_label=new))


def content_types_to_accounts(apps, schema_editor):
    _relabel(apps, schema_editor, old="tasks_app", new="accounts_app")


def content_types_to_tasks(apps, schema_editor):
    _relabel(apps, schema_editor, old="accounts_app", new="tasks_app")


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ('contenttypes', '0002_remove_content_type_name'),
        ('tasks_app', '0025_event_partitions'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='Tenant',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.SlugField(max_length=64, unique=True)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                    ],
                    options={
                        'db_table': 'tasks_app_tenant',
                    },
                ),
                migrations.CreateModel(
                    name='ApiKey',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('prefix', models.CharField(db_index=True, max_length=12)),
                        ('key_hash', models.CharField(max_length=64, unique=True)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('last_used_at', models.DateTimeField(blank=True, null=True)),
                        ('revoked', models.BooleanField(default=False)),
                        ('agents', models.JSONField(blank=True, db_default=[], default=list)),
                        ('tools', models.JSONField(blank=True, db_default=[], default=list)),
                        ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='api_keys', to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'db_table': 'tasks_app_apikey',
                    },
                ),
                migrations.CreateModel(
                    name='TenantQuota',
                    fields=[
                        ('tenant', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='quota', serialize=False, to='accounts_app.tenant')),
                        ('max_running', models.PositiveIntegerField(blank=True, help_text='Tasks of this tenant RUNNING at once (empty: TETHER_MAX_RUNNING_PER_TENANT).', null=True)),
                        ('weight', models.PositiveIntegerField(default=1, help_text='Share of the slots when several tenants wait (weighted fair admission).', validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(1000)])),
                        ('daily_spend_limit', models.DecimalField(blank=True, decimal_places=2, help_text='Dollars of model spend per UTC day (empty: no limit).', max_digits=14, null=True, validators=[django.core.validators.MinValueValidator(Decimal('0'))])),
                        ('monthly_spend_limit', models.DecimalField(blank=True, decimal_places=2, help_text='Dollars of model spend per UTC calendar month (empty: no limit).', max_digits=14, null=True, validators=[django.core.validators.MinValueValidator(Decimal('0'))])),
                        ('over_spend', models.CharField(choices=[('refuse', 'Refuse new tasks (429)'), ('queue', 'Accept new tasks, start them when the period allows')], default='refuse', help_text='What a submission gets once a spend limit is reached.', max_length=8)),
                        ('warned_day', models.DateField(blank=True, editable=False, null=True)),
                        ('warned_month', models.DateField(blank=True, editable=False, null=True)),
                        ('updated_at', models.DateTimeField(auto_now=True)),
                    ],
                    options={
                        'db_table': 'tasks_app_tenantquota',
                    },
                ),
                migrations.CreateModel(
                    name='Membership',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('role', models.CharField(choices=[('requester', 'Requester'), ('operator', 'Operator'), ('reviewer', 'Reviewer'), ('admin', 'Admin')], max_length=16)),
                        ('user', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='membership', to=settings.AUTH_USER_MODEL)),
                        ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='memberships', to='accounts_app.tenant')),
                    ],
                    options={
                        'db_table': 'tasks_app_membership',
                    },
                ),
                migrations.CreateModel(
                    name='TenantSecret',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.CharField(max_length=64)),
                        ('ciphertext', models.TextField()),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('created_by', models.CharField(max_length=150)),
                        ('rotated_at', models.DateTimeField(blank=True, null=True)),
                        ('rotated_by', models.CharField(blank=True, max_length=150)),
                        ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='secrets', to='accounts_app.tenant')),
                    ],
                    options={
                        'db_table': 'tasks_app_tenantsecret',
                        'ordering': ['name'],
                        'constraints': [models.UniqueConstraint(fields=('tenant', 'name'), name='secret_unique_name')],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(content_types_to_accounts, content_types_to_tasks),
    ]
