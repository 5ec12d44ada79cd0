"""HTTP tools' `secret_headers` stop naming environment variables.

A header that named a `TETHER_SECRET_*` variable becomes a template naming a
tenant secret derived from the rest of the name
(TETHER_SECRET_SHIPPING_TOKEN -> "{secret:shipping_token}"). No value is copied
from the environment: until a tenant admin stores that secret, calls of the tool
fail with a permission error naming it. Headers naming any other variable were
never sent and are dropped. Each conversion is printed.
"""
import re

from django.db import migrations

PREFIX = "TETHER_SECRET_"
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def secret_name(variable):
    name = re.sub(r"[^a-z0-9_-]", "_", variable.lower())[:64]
    return name if re.fullmatch(r"[a-z][a-z0-9_-]{0,63}", name) else ("s_" + name)[:64]


def forwards(apps, schema_editor):
    Tool = apps.get_model("tools_app", "Tool")
    for tool in Tool.objects.exclude(secret_headers={}).select_related("tenant").iterator():
        headers = tool.secret_headers if isinstance(tool.secret_headers, dict) else {}
        converted = {}
        for header, source in headers.items():
            if not isinstance(source, str) or not ENV_NAME.fullmatch(source):
                converted[header] = source  # already a template
            elif source.startswith(PREFIX) and len(source) > len(PREFIX):
                name = secret_name(source[len(PREFIX):])
                converted[header] = "{secret:%s}" % name
                print(f"\n  tool {tool.tenant.name}/{tool.name}: {header} from {source} -> "
                      f"{{secret:{name}}} (a tenant admin must store this secret)")
            else:
                print(f"\n  tool {tool.tenant.name}/{tool.name}: {header} from {source} dropped "
                      "(it was never sent)")
        if converted != headers:
            tool.secret_headers = converted
            tool.save(update_fields=["secret_headers"])


class Migration(migrations.Migration):

    dependencies = [
        ("tools_app", "0003_unique_keys_without_like_indexes"),
    ]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
