"""The Celery app. Tasks are just another caller of services (see tasks_app.tasks).

Its signals keep the worker's and beat's logging and metrics Tether's own:
- `setup_logging`: Celery does not replace the root logger's handlers; Django's
  `LOGGING` (text or JSON, `foundations.logs`) stays, at the level of `-l`, and
  stray writes to stdout and stderr become log lines, as Celery's own setup
  would make them; `celeryd_init`: no banner in JSON (it is not a log line);
- `worker_process_shutdown`: a pool child that exits first lets the slices its
  driver runs end (`tasks_app.runner.driver`, up to `TETHER_DRIVER_DRAIN_S`), and
  is marked dead in the multiprocess metrics directory; `worker_shutdown` does
  the same for a threads or solo pool (the driver is in the main process);
- the recovery sweeper (`tasks_app.runner.sweeper`): with the prefork pool, one
  thread per pool process, started after the fork (`worker_process_init`): a
  thread started in the main process would be copied half-way into every
  child the pool forks later (a lock held mid-fork stays held in the child),
  and the main process runs no tasks, so it has no connections of its own to
  keep healthy. Other pools (solo, threads) do not fork: the main process
  starts it when the worker is ready. The advisory lock makes them one sweep;
- without `PROMETHEUS_MULTIPROC_DIR`, `TETHER_WORKER_METRICS_PORT` makes each
  worker process serve its own figures: the main process on PORT, a prefork
  pool's children on PORT+1, PORT+2, ... (the child's index in the pool);
- traces (`foundations.tracing`, when an OTLP endpoint is set) start in each process
  that runs tasks: a prefork pool's children after the fork
  (`worker_process_init`: an exporter's threads and gRPC channels do not
  survive a fork), the worker itself with another pool, and beat; what is
  queued is sent when a pool process or the worker ends.
"""
import gc
import logging
import logging.config
import os
from typing import Any

from celery import Celery
from celery.concurrency import get_implementation
from celery.concurrency.prefork import TaskPool as PreforkPool
from celery.signals import (
    beat_init,
    celeryd_init,
    setup_logging,
    worker_init,
    worker_process_init,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
)
from celery.utils.log import current_process_index

from foundations import tracing
from foundations.metrics import multiprocess_dir, process_exited, serve_worker_metrics

# The signal handlers import Django's settings and the runtime when they run:
# `config/__init__` imports this module before Django is set up, so neither can
# be imported at the top.

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("tether")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@setup_logging.connect
def _keep_django_logging(loglevel: Any = None, **_: Any) -> None:
    from django.conf import settings

    logging.config.dictConfig(settings.LOGGING)
    if loglevel:
        logging.getLogger().setLevel(loglevel)
    if app.conf.worker_redirect_stdouts:
        app.log.redirect_stdouts_to_logger(logging.getLogger("celery.redirected"),
                                           loglevel=app.conf.worker_redirect_stdouts_level)


@celeryd_init.connect
def _no_banner_in_json(instance: Any = None, **_: Any) -> None:
    from django.conf import settings

    if settings.LOG_FORMAT == "json" and instance is not None:
        instance.quiet = True


@worker_init.connect
def _serve_main_metrics(sender: Any = None, **_: Any) -> None:
    _serve_metrics(offset=0)
    pool = get_implementation(getattr(sender, "pool_cls", None) or "prefork")
    if not (isinstance(pool, type) and issubclass(pool, PreforkPool)):
        tracing.setup("worker")  # no fork follows: this process runs the tasks


@worker_process_init.connect
def _serve_child_metrics(**_: Any) -> None:
    _serve_metrics(offset=current_process_index(base=1) or 0)
    tracing.setup("worker")


@beat_init.connect
def _beat_traces(**_: Any) -> None:
    tracing.setup("beat")


@worker_process_init.connect
def _freeze_startup_objects(**_: Any) -> None:
    """Everything a pool process holds once it has started (modules, settings,
    Django's and the SDKs' tables: about 250,000 objects) lives as long as the
    process: moved out of the collector's reach, so that the collections the
    driver's churn triggers walk only what the tasks create; and the youngest
    generation is collected every 10,000 allocations instead of 700, so that
    most of a step's short-lived objects are freed by their reference count
    before any collection walks them. Measured in the I/O workload (1,000
    tasks): the collector's time per pool process 5.6-6.2 s, then 4.0-4.5 s
    with the freeze, then 1.4-1.7 s with the threshold too, of about 45 s."""
    gc.freeze()
    gc.set_threshold(10_000, 20, 50)


@worker_process_init.connect
def _sweep_in_child(**_: Any) -> None:
    from tasks_app.runner.sweeper import start_process_sweeper

    start_process_sweeper()


@worker_ready.connect
def _sweep_in_main_unless_prefork(sender: Any = None, **_: Any) -> None:
    from celery.concurrency.prefork import TaskPool as PreforkPool

    pool_cls = getattr(getattr(sender, "controller", None), "pool_cls", None)
    if isinstance(pool_cls, type) and issubclass(pool_cls, PreforkPool):
        return  # each pool process sweeps (above)
    from tasks_app.runner.sweeper import start_process_sweeper

    start_process_sweeper()


@worker_process_shutdown.connect
def _child_exited(pid: int | None = None, **_: Any) -> None:
    _drain_driver()
    process_exited(pid or os.getpid())
    tracing.shutdown()


@worker_shutdown.connect
def _worker_exited(**_: Any) -> None:
    _drain_driver()
    tracing.shutdown()  # after the drain: the drained slices' spans are exported too


def _drain_driver() -> None:
    """Let the slices in flight end, then close the outbound connections they used."""
    from tasks_app.runner.driver import driver
    from tools_app.outbound import close_async_clients

    left = driver.drain()
    if left:
        logging.getLogger(__name__).warning(
            "%s slices still running at exit: their leases expire, the sweep resumes them", left)
    close_async_clients()


def _serve_metrics(*, offset: int) -> None:
    from django.conf import settings

    where = settings.TETHER_WORKER_METRICS_PORT
    if not where or multiprocess_dir():
        return
    host, _, port = where.rpartition(":")
    try:
        serve_worker_metrics(int(port) + offset, addr=host or "0.0.0.0")
    except OSError:  # the port is taken: the worker runs on, without its metrics
        logging.getLogger(__name__).exception("could not serve metrics on %s+%s", where, offset)
