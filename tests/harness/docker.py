"""A Docker engine for the tests marked `docker`: found, or a reason to skip; images and compose.

`tests/docker/engine.sh up` (run by `.ci/run`, or `make docker-up` by hand) starts an engine of
our own and writes its DOCKER_HOST to $AMPS_DOCKER_ROOT/env; an engine named by DOCKER_HOST or at
the default socket works too. Nothing here talks to any address but the engine's socket,
loopback and the containers the tests start.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
ENGINE_ROOT = Path(os.environ.get("AMPS_DOCKER_ROOT", "/tmp/amps-docker"))
COMMAND_TIMEOUT_S = 300.0


def engine_env() -> dict[str, str]:
    """The settings `engine.sh up` wrote (DOCKER_HOST, base and Prometheus images), if any."""
    found: dict[str, str] = {}
    env_file = ENGINE_ROOT / "env"
    if env_file.exists():
        for line in env_file.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep:
                found[key.strip()] = value.strip()
    return found


def docker_environment() -> dict[str, str]:
    """The process environment for docker and docker-compose commands."""
    env = dict(os.environ)
    for key, value in engine_env().items():
        env.setdefault(key, value)
    # testcontainers' reaper image cannot be pulled here (no registry).
    env.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
    return env


def why_no_engine() -> str | None:
    """None when an engine answers and docker-compose is installed, else the reason to skip."""
    if shutil.which("docker") is None:
        return "no docker client installed (tests/docker/engine.sh up installs docker.io)"
    if shutil.which("docker-compose") is None:
        return "no docker-compose installed (tests/docker/engine.sh up installs it)"
    try:
        done = subprocess.run(
            ["docker", "version", "--format", "{{.Server.Version}}"],
            env=docker_environment(),
            capture_output=True,
            text=True,
            timeout=15,
        )
    except subprocess.TimeoutExpired:
        return "the Docker engine did not answer within 15 s"
    if done.returncode != 0:
        return f"no Docker engine answers (run tests/docker/engine.sh up as root): {done.stderr.strip()[:200]}"  # noqa: E501
    return None


def run(
    args: Sequence[str],
    *,
    check: bool = True,
    timeout_s: float = COMMAND_TIMEOUT_S,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a docker/docker-compose command; on failure the exception carries its output."""
    done = subprocess.run(
        list(args),
        env=env or docker_environment(),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    if check and done.returncode != 0:
        raise AssertionError(
            f"{' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        )
    return done


def build_image(tag: str, work: Path) -> None:
    """Build the project's Dockerfile into `tag` from a context holding a wheelhouse, so the build
    needs no package index (these machines' containers cannot verify its certificate)."""
    context = work / "context"
    context.mkdir()
    for name in ("Dockerfile", ".dockerignore", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, context / name)
    for name in ("amps", "replication"):
        shutil.copytree(ROOT / name, context / name, ignore=shutil.ignore_patterns("__pycache__"))
    (context / "deploy").mkdir()
    for name in ("image-config.xml", "docker-entrypoint.sh"):
        shutil.copy(DEPLOY / name, context / "deploy" / name)

    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            str(context),
            "-w",
            str(context / "wheelhouse"),
        ],
        check=True,
        capture_output=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    base = engine_env().get("AMPS_BASE_IMAGE") or os.environ.get("AMPS_BASE_IMAGE")
    args = ["docker", "build", "--quiet", "-t", tag]
    if base:
        args += ["--build-arg", f"BASE_IMAGE={base}"]
    run([*args, str(context)])


def wait_for(
    condition: Callable[[], bool], what: str, timeout_s: float, every_s: float = 0.5
) -> None:
    """Poll `condition` until it holds; AssertionError naming `what` after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        if condition():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(every_s)


def health(container: str) -> str:
    """A container's health status (`starting`, `healthy`, `unhealthy`) or its state."""
    done = run(
        [
            "docker",
            "inspect",
            "-f",
            "{{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}",
            container,
        ],
        check=False,
    )
    return done.stdout.strip() or "missing"


def wait_healthy(container: str, what: str, timeout_s: float, every_s: float = 0.5) -> None:
    """Poll the container's health until `healthy`; AssertionError naming `what` after timeout_s."""
    wait_for(lambda: health(container) == "healthy", what, timeout_s, every_s)


class Compose:
    """docker-compose (v1, as packaged by Debian; the file works with v2 too) over one project."""

    def __init__(self, project: str, env: dict[str, str], files: Sequence[Path]) -> None:
        self.project = project
        self.env = {**docker_environment(), **env}
        self.files = list(files)

    def __call__(
        self, *args: str, check: bool = True, timeout_s: float = COMMAND_TIMEOUT_S
    ) -> subprocess.CompletedProcess[str]:
        base = ["docker-compose", "--project-name", self.project]
        for file in self.files:
            base += ["--file", str(file)]
        return run([*base, *args], check=check, timeout_s=timeout_s, env=self.env)

    def container(self, service: str) -> str:
        """The container id of a service."""
        return self("ps", "-q", service).stdout.strip()

    def volumes(self) -> Iterator[str]:
        """The names of this project's volumes."""
        done = run(
            [
                "docker",
                "volume",
                "ls",
                "-q",
                "--filter",
                f"label=com.docker.compose.project={self.project}",
            ]
        )
        yield from done.stdout.split()
