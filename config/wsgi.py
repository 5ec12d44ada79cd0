"""WSGI entry point (the console needs ASGI for live updates; this serves plain HTTP only)."""
import os

from django.core.wsgi import get_wsgi_application

from foundations import tracing

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
tracing.setup("web")  # before Django builds its middleware: the instrumentation adds one
application = get_wsgi_application()
