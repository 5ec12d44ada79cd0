#!/usr/bin/env python
"""Django's command-line entry point for Tether."""
import os
import sys

if __name__ == "__main__":
    if sys.argv[1:2] == ["bench"]:
        # The benchmark is no part of the product: only its own command installs it.
        os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
