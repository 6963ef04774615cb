"""Users, passwords and entitlements on a real instance (issue 12, S1-S3, S6, S7, Q18)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from amps import errors
from amps.client import Client, PublishFailure
from amps.security.users import User, hash_password, render_users
from tests.harness.cluster import wait_until
from tests.harness.instance import InstanceProcess, config_xml
from tests.harness.streams import more_within, take

PASSWORDS = {"alice": "alice-Secret-1", "bob": "bob-Secret-2", "carol": "carol-Secret-3"}
QUEUE = """<SOW><Queue><Name>work</Name><MessageType>json</MessageType>
<UnderlyingTopic>orders</UnderlyingTopic><LeasePeriod>30s</LeasePeriod></Queue></SOW>"""


def write_users(path: Path, names: tuple[str, ...] = ("alice", "bob")) -> None:
    entitlements = {
        # alice: the orders flow and its queue; bob: only the audit topics.
        "alice": (("^orders$", "work", "^prices"), ("^orders$",)),
        "bob": (("^audit",), ("^audit",)),
        "carol": ((".*",), (".*",)),
    }
    users = {
        name: User(name, hash_password(PASSWORDS[name]), *entitlements[name]) for name in names
    }
    path.write_text(render_users(users))


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[tuple[InstanceProcess, Path]]:
    users_file = tmp_path / "users.toml"
    write_users(users_file)
    extra = f"<Authentication><UsersFile>{users_file}</UsersFile></Authentication>{QUEUE}"
    process = InstanceProcess(tmp_path / "amps", config_xml(extra=extra)).start()
    try:
        yield process, users_file
    finally:
        process.kill()


def client(name: str, user: str, password: str | None = None) -> Client:
    secret = PASSWORDS.get(user, "x") if password is None else password
    return Client(name, user=user, password=secret, reconnect=False)


async def test_an_unknown_user_and_a_wrong_password_get_the_same_answer(
    secured: tuple[InstanceProcess, Path],
) -> None:
    """S7: one shape for every failed logon; nothing tells which part was wrong."""
    instance, _ = secured
    answers = []
    for user, password in (("mallory", "alice-Secret-1"), ("alice", "wrong")):
        with pytest.raises(errors.AuthenticationFailed) as raised:
            async with client(f"c-{user}", user, password) as refused:
                await refused.connect(instance.address, timeout_s=10)
        answers.append((type(raised.value), raised.value.message))
    assert answers[0] == answers[1]


async def test_a_logged_on_user_publishes_and_reads_what_it_is_entitled_to(
    secured: tuple[InstanceProcess, Path],
) -> None:
    """S2: write allows publish, read allows subscribe and replay."""
    instance, _ = secured
    async with client("alice-1", "alice") as alice:
        await alice.connect(instance.address)
        await alice.publish("orders", '{"id":1}')
        await alice.flush(10)
        subscription = await alice.subscribe("orders", bookmark="epoch")
        [message] = await take(subscription, 1)
        assert message.json() == {"id": 1}


async def test_publish_without_write_is_refused_not_entitled(
    secured: tuple[InstanceProcess, Path],
) -> None:
    instance, _ = secured
    failures: list[PublishFailure] = []
    async with Client(
        "bob-1", user="bob", password=PASSWORDS["bob"], publish_failed_callback=failures.append
    ) as bob:
        await bob.connect(instance.address)
        await bob.publish("orders", '{"id":666}')
        with pytest.raises(errors.NotEntitled):
            await bob.flush(10)
    assert [type(f.error) for f in failures] == [errors.NotEntitled]
    async with client("alice-check", "alice") as alice:
        await alice.connect(instance.address)
        subscription = await alice.subscribe("orders", bookmark="epoch")
        assert await more_within(subscription, 0.5) == []  # nothing was appended


async def test_subscribe_sow_and_ack_without_read_are_refused(
    secured: tuple[InstanceProcess, Path],
) -> None:
    """S2, Q18: read on the queue is what lets a client acknowledge its messages."""
    instance, _ = secured
    async with client("alice-2", "alice") as alice:
        await alice.connect(instance.address)
        await alice.publish("orders", '{"id":2}')
        await alice.flush(10)
    async with client("bob-2", "bob") as bob:
        await bob.connect(instance.address)
        with pytest.raises(errors.NotEntitled):
            await bob.subscribe("orders")
        with pytest.raises(errors.NotEntitled):
            await bob.subscribe("work")
        with pytest.raises(errors.NotEntitled):
            await bob.sow("work")
        with pytest.raises(errors.NotEntitled):
            await bob.sow_delete("work", filter="1=1")
    async with client("alice-3", "alice") as alice:
        await alice.connect(instance.address)
        queued = await alice.subscribe("work")
        [message] = await take(queued, 1)
        assert message.json() == {"id": 2}, "bob's filter ack removed nothing"


async def test_a_regex_subscription_receives_only_entitled_topics(
    secured: tuple[InstanceProcess, Path],
) -> None:
    instance, _ = secured
    async with client("carol-1", "carol", PASSWORDS["carol"]) as carol:
        # carol is not in the users file yet: refused.
        with pytest.raises(errors.AuthenticationFailed):
            await carol.connect(instance.address)
    _, users_file = secured
    write_users(users_file, ("alice", "bob", "carol"))  # takes effect without a restart
    async with client("carol-2", "carol") as carol:
        await carol.connect(instance.address)
        for topic in ("orders", "prices.ibm", "audit.log"):
            await carol.publish(topic, f'{{"t":"{topic}"}}')
        await carol.flush(10)
    async with client("alice-4", "alice") as alice:
        await alice.connect(instance.address)
        subscription = await alice.subscribe(".*", bookmark="epoch")
        got = [m.topic for m in await take(subscription, 2)] + [
            m.topic for m in await more_within(subscription, 0.5)
        ]
        assert got == ["orders", "prices.ibm"]


async def test_a_client_name_belongs_to_the_first_user_even_after_it_disconnects(
    secured: tuple[InstanceProcess, Path],
) -> None:
    """S3: nobody can take over another user's client name (and its sequence numbers)."""
    instance, _ = secured
    async with client("orders-feed", "alice") as alice:
        await alice.connect(instance.address)
        await alice.publish("orders", '{"id":3}')
        await alice.flush(10)
    for attempt in range(2):
        with pytest.raises(errors.NameInUse):
            async with client("orders-feed", "bob") as bob:
                await bob.connect(instance.address)
        if attempt == 0:
            instance.restart(kill=True)  # the binding is kept beside the journal
    async with client("orders-feed", "alice") as alice_again:
        await alice_again.connect(instance.address)


async def test_no_password_appears_in_the_instance_output(
    secured: tuple[InstanceProcess, Path],
) -> None:
    """S6: failed and successful logons leave no secret in the log."""
    instance, _ = secured
    async with client("alice-5", "alice") as alice:
        await alice.connect(instance.address)
    with pytest.raises(errors.AuthenticationFailed):
        async with client("alice-6", "alice", "alice-Wrong-9") as wrong:
            await wrong.connect(instance.address)
    # The instance's log lines reach the test through a reader thread: wait for the refusal's.
    await wait_until(lambda: "auth failure" in "".join(instance.output), timeout_s=10)
    output = "".join(instance.output)
    for secret in (*PASSWORDS.values(), "alice-Wrong-9"):
        assert secret not in output


STRICT_QUEUE = QUEUE.replace("<LeasePeriod>", "<Leasing>strict</Leasing><LeasePeriod>")


@pytest.mark.parametrize("leasing", ["strict", "sublet"])
async def test_strict_leasing_keeps_another_users_lease_out_of_reach(
    tmp_path: Path, leasing: str
) -> None:
    """Q10 with users: under `Leasing strict`, carol (read on everything) can acknowledge
    neither by bookmark nor by filter the message leased to alice's subscription, only the
    unleased one; under `sublet` she takes both. A lease belongs to the connection it was
    given to (Q6)."""
    users_file = tmp_path / "users.toml"
    write_users(users_file, ("alice", "carol"))
    queue = STRICT_QUEUE if leasing == "strict" else QUEUE
    extra = f"<Authentication><UsersFile>{users_file}</UsersFile></Authentication>{queue}"
    instance = InstanceProcess(tmp_path / "amps", config_xml(extra=extra)).start()
    try:
        async with client("alice-lease", "alice") as alice, client("carol-ack", "carol") as carol:
            await alice.connect(instance.address)
            await carol.connect(instance.address)
            for i in (1, 2):
                await alice.publish("orders", f'{{"id":{i}}}')
            await alice.flush(10)
            leased = await alice.subscribe("work", max_backlog=1)
            [held] = await take(leased, 1)
            assert await carol.sow_delete("work", bookmark=held.bookmark) == (
                0 if leasing == "strict" else 1
            )
            # The unleased message goes either way.
            assert await carol.sow_delete("work", filter="1=1") == 1
            assert await alice.sow("work") == []
            if leasing == "strict":
                # The lease holder itself still acknowledges its message.
                assert await alice.sow_delete("work", bookmark=held.bookmark) == 1
    finally:
        instance.kill()
