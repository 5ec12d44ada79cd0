"""The console's workflow pages: list, detail with versions and release, the
definition editor, and the DAG drawn on a run's task page."""
