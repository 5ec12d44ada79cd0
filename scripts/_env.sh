# Shared by scripts/start and scripts/test: the virtualenv, installed once and
# re-installed only when a pyproject.toml changes (Tether's or the Python
# client's: a stamp file newer than both). scripts/start installs what serving
# needs (`pip install -e .`), scripts/test adds the [dev] extras; both install
# the client and its `tether` command (clients/python) too. Each has its own
# stamp, and the [dev] install, a superset, satisfies both. Sourced, not run.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${TETHER_VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"
STAMP="$VENV/.tether-installed"              # Tether with its [dev] extras
SERVE_STAMP="$VENV/.tether-installed-serve"  # Tether, what serving needs only

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

CLIENT="$ROOT/clients/python"

fresh() {  # stamp: installed since either pyproject.toml last changed
    [ -f "$1" ] && [ "$1" -nt "$ROOT/pyproject.toml" ] && [ "$1" -nt "$CLIENT/pyproject.toml" ]
}

ensure_venv() {  # [dev]: with the test and lint tools too
    local extras="${1:-}" base="${PYTHON:-}"
    if [ -z "$base" ]; then
        for candidate in python3.11 python3.12 python3.13 python3; do
            if command -v "$candidate" >/dev/null 2>&1; then base="$candidate"; break; fi
        done
    fi
    if [ ! -x "$PY" ]; then
        [ -n "$base" ] || { echo "no python3 found (need Python 3.11+)" >&2; exit 1; }
        say "creating the virtualenv $VENV"
        "$base" -m venv "$VENV"
    fi
    if [ "${TETHER_SKIP_INSTALL:-0}" = "1" ]; then
        return
    fi
    if fresh "$STAMP" || { [ "$extras" != "dev" ] && fresh "$SERVE_STAMP"; }; then
        return
    fi
    if [ "$extras" = "dev" ]; then
        say "installing Tether, its dependencies and the dev tools into $VENV"
        "$PY" -m pip install --disable-pip-version-check -q -e "$ROOT[dev]" -e "$CLIENT"
        touch "$STAMP"
    else
        say "installing Tether and its dependencies into $VENV"
        "$PY" -m pip install --disable-pip-version-check -q -e "$ROOT" -e "$CLIENT"
        touch "$SERVE_STAMP"
    fi
}
