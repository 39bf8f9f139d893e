"""The embedded set-up's commands work as the README writes them (issue 18, defect 2).

`make run` (scripts/run.sh) exports DEBUG=true for the server it starts, but the README's next
step, ``.venv/bin/python manage.py createsuperuser``, runs in a plain shell: without a SECRET_KEY
it failed with ``ImproperlyConfigured: SECRET_KEY is required when DEBUG is false``. run.sh now
writes one into ``.env`` once (scripts/ensure_env.sh), which settings read.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "ensure_env.sh"


def _run(env_file: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), str(env_file)], capture_output=True, text=True, check=True
    )


def _key(env_file: Path, name: str = "SECRET_KEY") -> str:
    (line,) = [x for x in env_file.read_text().splitlines() if x.startswith(f"{name}=")]
    return line.removeprefix(f"{name}=")


def test_a_key_is_written_once_and_kept(tmp_path):
    env_file = tmp_path / ".env"
    assert _run(env_file).stdout == (
        f"wrote a new SECRET_KEY to {env_file}\n"
        f"wrote a new CONNECTION_ENCRYPTION_KEY to {env_file}\n"
    )
    key = _key(env_file)
    assert len(key) >= 60
    assert oct(env_file.stat().st_mode & 0o777) == "0o600"
    assert _run(env_file).stdout == ""
    assert _key(env_file) == key


def test_a_connection_encryption_key_is_written_once_valid_and_kept(tmp_path, settings):
    """`make run` writes CONNECTION_ENCRYPTION_KEY too (issue 32): a staff user can save a
    keyed connection in embedded mode. The written value is one connections/crypto.py accepts."""
    from connections import crypto

    env_file = tmp_path / ".env"
    env_file.write_text("SECRET_KEY=mine\n")
    assert _run(env_file).stdout == f"wrote a new CONNECTION_ENCRYPTION_KEY to {env_file}\n"
    key = _key(env_file, "CONNECTION_ENCRYPTION_KEY")
    assert len(key) == 64 and "," not in key
    settings.CONNECTION_ENCRYPTION_KEY = key
    assert crypto.configured() is True
    assert crypto.key_decrypt(crypto.key_encrypt("sk-test-123")) == "sk-test-123"
    assert _run(env_file).stdout == ""
    assert _key(env_file, "CONNECTION_ENCRYPTION_KEY") == key
    assert env_file.read_text().count("CONNECTION_ENCRYPTION_KEY=") == 1
    assert _key(env_file) == "mine"


def test_an_existing_env_keeps_its_lines_and_its_key(tmp_path):
    env_file = tmp_path / ".env"
    env_file.write_text("LOG_LEVEL=debug\n")
    _run(env_file)
    lines = env_file.read_text().splitlines()
    assert lines[0] == "LOG_LEVEL=debug" and len(lines) == 5
    env_file.write_text("SECRET_KEY=mine\nCONNECTION_ENCRYPTION_KEY=ours\n")
    _run(env_file)
    assert env_file.read_text() == "SECRET_KEY=mine\nCONNECTION_ENCRYPTION_KEY=ours\n"


def test_the_examples_placeholder_and_an_empty_key_are_replaced_in_place(tmp_path):
    """A .env copied from .env.example (as docker-compose.yml asks) names the public
    placeholder SECRET_KEY and an empty CONNECTION_ENCRYPTION_KEY: both are written anew, on
    their own lines, every other line kept."""
    env_file = tmp_path / ".env"
    example = (ROOT / ".env.example").read_text()
    env_file.write_text(example)

    assert _run(env_file).stdout == (
        f"replaced the placeholder SECRET_KEY in {env_file}\n"
        f"replaced the placeholder CONNECTION_ENCRYPTION_KEY in {env_file}\n"
    )

    written = env_file.read_text().splitlines()
    assert len(_key(env_file)) >= 60 and "change-me" not in _key(env_file)
    assert len(_key(env_file, "CONNECTION_ENCRYPTION_KEY")) == 64
    old = example.splitlines()
    assert len(written) == len(old)
    changed = [i for i, (a, b) in enumerate(zip(old, written, strict=True)) if a != b]
    assert [old[i].split("=")[0] for i in changed] == ["SECRET_KEY", "CONNECTION_ENCRYPTION_KEY"]
    assert oct(env_file.stat().st_mode & 0o777) == "0o600"
    assert _run(env_file).stdout == ""


def test_settings_refuse_the_examples_placeholder_key_without_debug():
    env = {**os.environ, "DEBUG": "false", "SECRET_KEY": "change-me-to-a-long-random-string"}
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE',"
            " 'chat_platform.settings'); django.setup()",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode != 0
    assert "SECRET_KEY is still the placeholder of .env.example" in run.stderr


@pytest.mark.timeout(180)
def test_createsuperuser_runs_as_the_readme_writes_it_with_the_written_key(tmp_path):
    """Same environment as a shell after `make run`: no DEBUG, no SECRET_KEY exported, the key
    only in the .env file (passed here as the variable settings would read from it)."""
    env_file = tmp_path / ".env"
    _run(env_file)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DEBUG", "SECRET_KEY", "REDIS_URL", "DATABASE_URL"}
        and not k.startswith("PYTEST")
    }
    env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'db.sqlite3'}"
    manage = [sys.executable, str(ROOT / "manage.py")]
    bare = subprocess.run([*manage, "check"], env=env, cwd=tmp_path, capture_output=True, text=True)
    if not (ROOT / ".env").exists():  # a developer's own .env would supply a key
        assert bare.returncode != 0
        assert "SECRET_KEY is required when DEBUG is false" in bare.stderr
    env["SECRET_KEY"] = _key(env_file)
    subprocess.run([*manage, "migrate", "-v", "0"], env=env, cwd=tmp_path, check=True)
    made = subprocess.run(
        [
            *manage,
            "createsuperuser",
            "--noinput",
            "--username",
            "admin",
            "--email",
            "admin@example.com",
        ],
        env={**env, "DJANGO_SUPERUSER_PASSWORD": "a-long-admin-password"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip() == "Superuser created successfully."


INSTALL = ROOT / "scripts" / "install_if_changed.sh"


def _fake_venv(tmp_path: Path, log: Path, *, uv: bool) -> None:
    """A venv whose python (and uv, if ``uv``) only record their arguments in ``log``."""
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("python", "uv") if uv else ("python",):
        (bin_dir / name).write_text(f'#!/bin/sh\necho "{name} $*" >> {log}\n')
        (bin_dir / name).chmod(0o755)


def test_the_package_is_installed_again_only_when_pyproject_changed(tmp_path):
    """`make run` skips the install on a restart with nothing changed (issue 32): a fake venv
    records each call; the stamp holds the hash of the pyproject.toml last installed. uv
    installs, once pip has fetched it (scripts/install.sh)."""
    log = tmp_path / "install.log"
    _fake_venv(tmp_path, log, uv=True)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')

    def start() -> str:
        command = ["bash", str(INSTALL), ".venv"]
        done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, check=True)
        return done.stdout

    assert start() == "installed the package (pyproject.toml changed)\n"
    assert log.read_text().splitlines() == [
        "python -m pip install -q uv",
        "uv pip install -q --python .venv/bin/python -e .",
    ]
    assert start() == ""
    assert len(log.read_text().splitlines()) == 2
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\nversion = "2"\n')
    assert start() == "installed the package (pyproject.toml changed)\n"
    assert len(log.read_text().splitlines()) == 4
    assert start() == ""


def test_without_uv_the_install_is_pip_s_with_the_extras_asked_for(tmp_path):
    """uv could not be had (its package unreachable): pip installs, as before."""
    log = tmp_path / "install.log"
    _fake_venv(tmp_path, log, uv=False)
    command = ["bash", str(ROOT / "scripts" / "install.sh"), ".venv", "dev"]
    subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, check=True)
    assert log.read_text().splitlines() == [
        "python -m pip install -q uv",
        "python -m pip install -q --upgrade pip",
        "python -m pip install -q -e .[dev]",
    ]


def test_a_failed_install_is_tried_again_on_the_next_start(tmp_path):
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\nexit 1\n")
    python.chmod(0o755)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    failed = subprocess.run(["bash", str(INSTALL), ".venv"], cwd=tmp_path, check=False)
    assert failed.returncode == 1
    assert not (tmp_path / ".venv" / ".installed-pyproject.sha256").exists()
