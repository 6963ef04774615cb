"""The image (issue 13): builds from the Dockerfile, runs as a non-root user, answers on its
published port, reports healthy, and stops cleanly on SIGTERM (D2); it listens beyond loopback,
so it needs users (issue 12): the entrypoint makes them from AMPS_ADMIN_PASSWORD."""

from __future__ import annotations

import asyncio

from amps.client import Client
from tests.harness.cluster import free_ports
from tests.harness.docker import run, wait_healthy
from tests.harness.streams import take

PASSWORD = "image-test-password-1"

HEALTHY_WITHIN_S = 60.0


def test_image_runs_non_root_healthy_and_stops_cleanly_on_sigterm(amps_image: str) -> None:
    """The image's default configuration serves clients; `docker stop` is a clean shutdown."""
    client_port, admin_port = free_ports(2)
    container_id = run(
        ["docker", "run", "--detach", "--env", f"AMPS_ADMIN_PASSWORD={PASSWORD}",
         "--publish", f"127.0.0.1:{client_port}:9007", "--publish", f"127.0.0.1:{admin_port}:8085",
         amps_image],
    ).stdout.strip()  # fmt: skip
    try:
        wait_healthy(container_id, "container healthy", HEALTHY_WITHIN_S)
        user = run(["docker", "exec", container_id, "id", "-u"]).stdout.strip()
        assert user == "10001", "the server runs as the image's amps user, not root"

        async def publish_and_read() -> list[bytes]:
            address = f"127.0.0.1:{client_port}"
            async with Client("docker-image-test", user="admin", password=PASSWORD) as client:
                await client.connect(address)
                for i in range(3):
                    await client.publish("orders", f'{{"id":{i}}}')
                await client.flush(10)
                subscription = await client.subscribe("orders", bookmark="epoch")
                return [message.data for message in await take(subscription, 3)]

        assert asyncio.run(publish_and_read()) == [b'{"id":0}', b'{"id":1}', b'{"id":2}']
        run(["docker", "stop", "--time", "10", container_id], timeout_s=30)
        exit_code = run(["docker", "inspect", "-f", "{{.State.ExitCode}}", container_id])
        # 0: the server handled SIGTERM; 137 would mean docker had to SIGKILL it after 10 s.
        assert exit_code.stdout.strip() == "0"
        logs = run(["docker", "logs", container_id]).stderr
        assert "stopping instance" in logs
        assert "made /var/lib/amps/users.toml with user admin" in logs
        assert PASSWORD not in logs
    finally:
        run(["docker", "rm", "--force", "--volumes", container_id], check=False)


def test_image_without_users_refuses_to_start_naming_the_fix(amps_image: str) -> None:
    """Default-deny: listening on every interface with no users file and no AMPS_ADMIN_PASSWORD,
    the instance exits 78 saying how to make the users."""
    done = run(["docker", "run", "--rm", amps_image], check=False, timeout_s=60)
    assert done.returncode == 78, done.stdout + done.stderr
    assert "amps users add NAME --file /var/lib/amps/users.toml" in done.stderr
    assert "AMPS_ADMIN_PASSWORD" in done.stderr
