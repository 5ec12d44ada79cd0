"""WSGI entry point (the console needs ASGI for live updates; this serves plain HTTP only)."""
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_wsgi_application()
