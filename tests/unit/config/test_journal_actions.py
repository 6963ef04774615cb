"""The journal lifecycle in `Actions` (AMPS-REFERENCE §1.4, §1.8; issue 11 item 8)."""

from __future__ import annotations

import pytest

from amps.config import load_config

from .helpers import LOG, document, errors_of

A = "AMPSConfig/Actions/Action[1]"
SCHEDULE = (
    "<On><Module>amps-action-on-schedule</Module><Options><Every>{every}</Every></Options></On>"
)


def journal_action(do: str, *, every: str = "1h", age: str = "1d", log: str = LOG) -> str:
    step = f"<Do><Module>{do}</Module><Options><Age>{age}</Age></Options></Do>"
    return document(
        f"<Actions><Action>{SCHEDULE.format(every=every)}{step}</Action></Actions>", log=log
    )


ARCHIVE_LOG = LOG.replace(
    "</TransactionLog>",
    "<JournalArchiveDirectory>/tmp/a</JournalArchiveDirectory></TransactionLog>",
)


@pytest.mark.parametrize(
    "module",
    [
        "amps-action-do-remove-journal",
        "amps-action-do-archive-journal",
        "amps-action-do-compress-journal",
    ],
)
def test_a_scheduled_journal_action_loads(module: str) -> None:
    (action,) = load_config(journal_action(module, log=ARCHIVE_LOG)).actions
    assert action.on[0].option("Every") == "1h"
    assert (action.do[0].module, action.do[0].option("Age")) == (module, "1d")


def test_archiving_needs_an_archive_directory() -> None:
    (error,) = errors_of(journal_action("amps-action-do-archive-journal"))
    assert error.path == "AMPSConfig/TransactionLog/JournalArchiveDirectory"
    assert "amps-action-do-archive-journal" in error.expected


@pytest.mark.parametrize(
    ("every", "age", "path", "expected"),
    [
        ("0s", "1d", f"{A}/On[1]/Options/Every", "from 1ms"),
        ("Saturday", "1d", f"{A}/On[1]/Options/Every", "a duration"),
        ("1h", "soon", f"{A}/Do[1]/Options/Age", "a duration"),
    ],
)
def test_bad_intervals_name_the_option(every: str, age: str, path: str, expected: str) -> None:
    (error,) = errors_of(journal_action("amps-action-do-remove-journal", every=every, age=age))
    assert error.path == path
    assert expected in error.expected


def test_age_is_required() -> None:
    text = journal_action("amps-action-do-remove-journal").replace("<Age>1d</Age>", "")
    (error,) = errors_of(text)
    assert error.path == f"{A}/Do[1]/Options/Age"


def test_each_do_must_be_one_its_on_can_run() -> None:
    """A dead letter needs an expired message; a journal action needs a schedule."""
    publish = (
        "<Do><Module>amps-action-do-publish-message</Module><Options><Topic>dead</Topic>"
        "<MessageType>json</MessageType><Data>x</Data></Options></Do>"
    )
    text = document(f"<Actions><Action>{SCHEDULE.format(every='1h')}{publish}</Action></Actions>")
    (error,) = errors_of(text)
    assert error.path == f"{A}/On[1]/Module"
    assert "amps-action-do-publish-message" in error.expected
