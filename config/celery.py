"""The Celery app. Tasks are just another caller of services (see tasks_app.tasks)."""
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("tether")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
