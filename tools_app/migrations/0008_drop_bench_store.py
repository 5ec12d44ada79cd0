# The benchmark's table left the product (see 0002_bench_store): dropped where an
# earlier version created it; nothing to do on a database that never had it.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('tools_app', '0007_breakers'),
    ]

    operations = [
        migrations.RunSQL(
            "DROP TABLE IF EXISTS tools_app_benchrecord",
            reverse_sql=migrations.RunSQL.noop,
        ),
    ]
