# Shared by scripts/start and scripts/test: the virtualenv, installed once and
# re-installed only when pyproject.toml changes (a stamp file newer than it).
# Sourced, not run.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${TETHER_VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"
STAMP="$VENV/.tether-installed"

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

ensure_venv() {
    local base="${PYTHON:-}"
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
    if [ -f "$STAMP" ] && [ "$STAMP" -nt "$ROOT/pyproject.toml" ]; then
        return
    fi
    say "installing Tether and its dependencies into $VENV"
    "$PY" -m pip install --disable-pip-version-check -q -e "$ROOT[dev]"
    touch "$STAMP"
}
