"""The settings of the `bench` command's own process: the product's settings
plus this app, so Django finds the command. manage.py selects them for
`bench` only; the workers and daphne the bench starts run `config.settings`
unchanged, as production does."""

from config.settings import *  # noqa: F401,F403
from config.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "benchmarks"]
