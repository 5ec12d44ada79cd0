"""Where the client finds its server and key: the arguments given, else the
environment (`TETHER_URL`, `TETHER_API_KEY`), else the file `tether login`
writes (`config.json` in the user's configuration folder, or the path in
`TETHER_CONFIG`), readable by its owner only."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import typer

ENV_URL, ENV_KEY, ENV_FILE = "TETHER_URL", "TETHER_API_KEY", "TETHER_CONFIG"


class NotConfigured(Exception):
    """No server URL or no API key anywhere."""


@dataclass(frozen=True)
class Settings:
    url: str
    api_key: str


def config_path() -> Path:
    explicit = os.environ.get(ENV_FILE)
    if explicit:
        return Path(explicit)
    return Path(typer.get_app_dir("tether")) / "config.json"


def read_file(path: Path | None = None) -> dict[str, str]:
    path = path or config_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    return {k: v for k, v in data.items() if isinstance(v, str)} if isinstance(data, dict) else {}


def write_file(url: str, api_key: str, path: Path | None = None) -> Path:
    """Write the URL and key, mode 0600 from the first byte (the key is a secret)."""
    path = path or config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_name(path.name + ".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump({"url": url, "api_key": api_key}, f, indent=2)
    os.chmod(temporary, 0o600)  # an older file of that name kept its mode
    os.replace(temporary, path)
    return path


def resolve(url: str | None = None, api_key: str | None = None) -> Settings:
    saved: dict[str, str] | None = None

    def pick(given: str | None, env: str, key: str) -> str:
        nonlocal saved
        if given:
            return given
        if os.environ.get(env):
            return os.environ[env]
        if saved is None:
            saved = read_file()
        if saved.get(key):
            return saved[key]
        raise NotConfigured(f"no {key}: pass it, set {env}, or run `tether login`")

    return Settings(url=pick(url, ENV_URL, "url"), api_key=pick(api_key, ENV_KEY, "api_key"))


def api_base(url: str) -> str:
    """The API's root from a server URL, with or without its /api/v1."""
    url = url.rstrip("/")
    return url if url.endswith("/api/v1") else url + "/api/v1"
