"""Fixtures for the tests in real containers (marker `docker`): skipped with the reason where no
Docker engine answers; `.ci/run` starts one (tests/docker/engine.sh) so CI runs them."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.docker import DEPLOY, Compose, build_image, engine_env, run, why_no_engine

ADMIN_USER = "admin"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.docker)


@pytest.fixture(scope="session")
def docker_engine() -> None:
    reason = why_no_engine()
    if reason is not None:
        pytest.skip(reason)


@pytest.fixture(scope="session")
def amps_image(docker_engine: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The project's image, built once per run from this checkout."""
    tag = f"amps-test:{uuid.uuid4().hex[:12]}"
    build_image(tag, tmp_path_factory.mktemp("image"))
    yield tag
    run(["docker", "image", "rm", "--force", tag], check=False)
    run(
        ["docker", "image", "prune", "--force", "--filter", "label=org.amps.stage=build"],
        check=False,
    )


def prometheus_image() -> str:
    """Prometheus for the compose tests: the image engine.sh built from Debian's package, or
    PROMETHEUS_IMAGE."""
    image = os.environ.get("PROMETHEUS_IMAGE") or engine_env().get("PROMETHEUS_IMAGE")
    if not image:
        pytest.skip("no Prometheus image (tests/docker/engine.sh up builds one)")
    return image


@pytest.fixture(scope="session")
def compose_secrets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """deploy/make-secrets.sh's certificates and admin password, made once for the run."""
    secrets = tmp_path_factory.mktemp("compose") / "secrets"
    subprocess.run(
        [str(DEPLOY / "make-secrets.sh"), str(secrets)], check=True, capture_output=True, timeout=60
    )
    return secrets


def admin_password(secrets: Path) -> str:
    """The admin password make-secrets.sh put in the instances' env-file."""
    for line in (secrets / "amps.env").read_text().splitlines():
        name, _, value = line.partition("=")
        if name == "AMPS_ADMIN_PASSWORD":
            return value
    raise AssertionError(f"no AMPS_ADMIN_PASSWORD in {secrets / 'amps.env'}")


def compose_project(amps_image: str, ports: dict[str, int], secrets: Path) -> Compose:
    """A compose project over deploy/docker-compose.yml with the test image, free host ports and
    the run's secrets."""
    env = {
        "AMPS_IMAGE": amps_image,
        "PROMETHEUS_IMAGE": prometheus_image(),
        "AMPS_SECRETS": str(secrets),
    }
    env.update({name: str(port) for name, port in ports.items()})
    return Compose(f"ampstest{uuid.uuid4().hex[:8]}", env, [DEPLOY / "docker-compose.yml"])
