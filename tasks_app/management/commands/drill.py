"""`python manage.py drill`: a fault-injection exercise against the deployment
the settings point at (tasks_app/drill/). Prints a report, writes it as JSON
(`--json PATH`), and exits non-zero when a promise broke."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from tasks_app.drill.exercise import Drill, DrillAborted, DrillOptions


class Command(BaseCommand):
    help = "Inject faults on purpose in a tenant of the drill's own; report what held."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--quick", action="store_true", help="small batches, short faults")
        parser.add_argument("--listen", default="127.0.0.1",
                            help="address the drill's downstream listens on")
        parser.add_argument("--advertise", default="127.0.0.1",
                            help="address workers reach the drill's downstream at")
        parser.add_argument("--port", type=int, default=0, help="its port (0: any free one)")
        parser.add_argument("--start-workers", type=int, default=0,
                            help="start this many Celery workers (the drill may kill one)")
        parser.add_argument("--json", default="", help="where to write the JSON report")

    def handle(self, *args: Any, **options: Any) -> None:
        drill = Drill(DrillOptions(quick=options["quick"], listen=options["listen"],
                                   advertise=options["advertise"], port=options["port"],
                                   start_workers=options["start_workers"]))
        try:
            report = drill.run()
        except DrillAborted as exc:
            raise CommandError(str(exc)) from exc
        path = Path(options["json"] or f"drill-{time.strftime('%Y%m%d-%H%M%S')}.json")
        path.write_text(json.dumps(report, indent=2))
        self._print(report, path)
        if not report["promises_kept"]:
            raise CommandError(f"promises broken: {', '.join(report['broken'])}")

    def _print(self, report: dict[str, Any], path: Path) -> None:
        out = self.stdout
        out.write(f"Fault drill in tenant {report['tenant']} ({report['duration_s']} s)")
        for p in report["phases"]:
            verdict = {True: "HELD", False: "BROKEN", None: "n/a"}[p["promise_kept"]]
            out.write(f"- {p['fault']}: {verdict}")
            if p["tether_did"]:
                out.write(f"    Tether: {p['tether_did']}")
            if p["tasks"]:
                out.write(f"    tasks finished {p['finished']}/{p['tasks']}, succeeded "
                          f"{p['succeeded']}, duplicates {p['duplicates']}, "
                          f"time to recover {p['recover_s']} s")
            if p.get("breaker_openings"):
                out.write(f"    breaker openings {p['breaker_openings']}, calls while open "
                          f"{p.get('calls_while_open', 0)}")
            if p["note"]:
                out.write(f"    {p['note']}")
        out.write(f"JSON report: {path}")
        out.write("every promise held" if report["promises_kept"] else "A PROMISE BROKE")
