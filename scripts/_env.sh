# Shared by scripts/start and scripts/test: the virtualenv, installed once and
# re-installed only when pyproject.toml changes (a stamp file newer than it).
# scripts/start installs what serving needs (`pip install -e .`), scripts/test
# adds the [dev] extras; each has its own stamp, and the [dev] install, a
# superset, satisfies both. Sourced, not run.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${TETHER_VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"
STAMP="$VENV/.tether-installed"              # Tether with its [dev] extras
SERVE_STAMP="$VENV/.tether-installed-serve"  # Tether, what serving needs only

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

fresh() {  # stamp: installed since pyproject.toml last changed
    [ -f "$1" ] && [ "$1" -nt "$ROOT/pyproject.toml" ]
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
        "$PY" -m pip install --disable-pip-version-check -q -e "$ROOT[dev]"
        touch "$STAMP"
    else
        say "installing Tether and its dependencies into $VENV"
        "$PY" -m pip install --disable-pip-version-check -q -e "$ROOT"
        touch "$SERVE_STAMP"
    fi
}
