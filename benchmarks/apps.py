from django.apps import AppConfig


class BenchmarksConfig(AppConfig):
    """The benchmark (`manage.py bench`): installed only by `benchmarks.settings`,
    which manage.py uses for the `bench` command; never by the product."""

    name = "benchmarks"
    default_auto_field = "django.db.models.BigAutoField"
