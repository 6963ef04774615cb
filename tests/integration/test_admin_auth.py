"""The admin interface with authentication on (issue 12, S1): statistics need read on admin,
changes an admin user and a POST; a GET never acts."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from amps.security.users import User, hash_password, render_users
from tests.harness.instance import InstanceProcess, config_xml

PASSWORDS = {"ops": "ops-Secret-1", "watcher": "watch-Secret-2", "alice": "alice-Secret-3"}
COMPRESS = "/amps/administrator/transaction_log/journals/all/compress"


@pytest.fixture(scope="module")
def instance(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InstanceProcess]:
    root = tmp_path_factory.mktemp("admin-auth")
    users = {
        "ops": User("ops", hash_password(PASSWORDS["ops"]), ("^orders$",), admin=True),
        "watcher": User("watcher", hash_password(PASSWORDS["watcher"]), ("^admin$",)),
        "alice": User("alice", hash_password(PASSWORDS["alice"]), ("^orders$",), ("^orders$",)),
    }
    (root / "users.toml").write_text(render_users(users))
    extra = f"<Authentication><UsersFile>{root / 'users.toml'}</UsersFile></Authentication>"
    process = InstanceProcess(root / "amps", config_xml(extra=extra)).start()
    try:
        yield process
    finally:
        process.kill()


def request(
    instance: InstanceProcess, path: str, user: str | None = None, *, method: str = "GET",
    password: str | None = None,
) -> tuple[int, dict[str, str], bytes]:  # fmt: skip
    """(status, headers, body) of one admin request, with HTTP Basic credentials for `user`."""
    url = f"http://127.0.0.1:{instance.admin_port}{path}"
    sent = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    if user is not None:
        secret = PASSWORDS.get(user, "") if password is None else password
        token = base64.b64encode(f"{user}:{secret}".encode()).decode()
        sent.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(sent, timeout=30) as answer:
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def test_statistics_need_credentials_and_read_on_admin(instance: InstanceProcess) -> None:
    status, headers, _ = request(instance, "/amps/instance.json")
    assert status == 401
    assert headers["WWW-Authenticate"].startswith("Basic")
    assert request(instance, "/metrics", "watcher", password="wrong")[0] == 401
    assert request(instance, "/amps/instance.json", "nobody")[0] == 401
    status, _, body = request(instance, "/metrics", "alice")
    assert (status, body) == (403, b"not entitled: statistics need read on admin\n")
    assert request(instance, "/amps/instance.json", "watcher")[0] == 200
    assert request(instance, "/metrics", "ops")[0] == 200
    assert request(instance, "/health")[0] == 200  # liveness probes stay anonymous


def test_a_change_needs_an_admin_user(instance: InstanceProcess) -> None:
    assert request(instance, COMPRESS, method="POST")[0] == 401
    status, _, body = request(instance, COMPRESS, "watcher", method="POST")
    assert status == 403
    assert b"admin user" in body
    assert request(instance, COMPRESS, "ops", method="POST")[0] == 200


def test_a_get_on_an_action_path_is_refused_405(instance: InstanceProcess) -> None:
    for user in (None, "ops"):
        status, headers, _ = request(instance, COMPRESS, user)
        assert (status, headers["Allow"]) == (405, "POST")


def test_the_admin_cli_logs_on_with_user_and_amps_password(instance: InstanceProcess) -> None:
    command = [sys.executable, "-m", "amps", "admin", "status"]
    command += ["--server", f"127.0.0.1:{instance.admin_port}"]
    anonymous = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert anonymous.returncode == 1
    assert "401" in anonymous.stderr
    env = {**os.environ, "AMPS_PASSWORD": PASSWORDS["ops"]}
    done = subprocess.run(
        [*command, "--user", "ops"], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    assert PASSWORDS["ops"] not in "".join(instance.output)


def test_the_switches_need_an_admin_user_too(instance: InstanceProcess) -> None:
    """Issue 9: proxied transfer and transport switches are authenticated like every change."""
    for path in (
        "/amps/administrator/queues/work/enable_proxied_transfer",
        "/amps/administrator/transports/grpc/disable",
    ):
        assert request(instance, path, method="POST")[0] == 401
        assert request(instance, path, "watcher", method="POST")[0] == 403
    status, _, body = request(
        instance, "/amps/administrator/queues/work/enable_proxied_transfer", "ops", method="POST"
    )
    assert (status, b"no such queue 'work'" in body) == (404, True)
    assert request(instance, "/amps/instance/transports", "watcher")[0] == 200
