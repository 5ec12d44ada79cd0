"""The performance benchmark (`python manage.py bench`).

No part of the product: nothing in config/ or the apps imports it (an
import-linter contract), its table is not in their migrations, and only
manage.py's `bench` command installs it (`settings`).

Measures Tether's own overhead per step in production mode (PostgreSQL, Redis,
real Celery workers, daphne) and prints figures; it never asserts a speed.

Parts:
- `config`     the run's knobs and the environment of the processes it starts;
- `tools`      its instant read and idempotent write tools;
- `models`     the write tool's table, created by the bench in its own database;
- `world`      the bench tenant, tools, agent, user, session, scripts;
- `procs`      Celery worker and daphne subprocesses;
- `datagen`    100k tasks / 1M events for the console timings (SQL, fast);
- `io_load`    tasks waiting on a model and an HTTP tool (`edge_server`, the fake);
- `workflow_load` runs of a 6-node workflow: wall time against its critical
               path, node steps/s against the scripted runner's;
- `throughput` N tasks x M steps through the real runner; a waiting task's cost;
- `floor`      the same durable writes per step with bare psycopg 3;
- `long_task`  one long task: step ~10 vs step ~L;
- `anatomy`    statements, commits and connections of one runner step;
- `ws_latency` commit -> WebSocket arrival on the console's live channel;
- `console`    task list and task page response times;
- `stats`      percentiles and step intervals; `report` the JSON and the table;
- `run`        the phases in order.
"""
