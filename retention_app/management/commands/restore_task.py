"""`manage.py restore_task ID`: bring an archived task back online from its file."""
from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from foundations.errors import DomainError

from ...services.restore import task_restore


class Command(BaseCommand):
    help = "Restore an archived task (and everything archived with it) from its archive file."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("task_id", type=int)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            rows = task_restore(options["task_id"])
        except DomainError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(f"task {options['task_id']} restored: {rows} rows")
