"""`Actions/Action`: the On/Do modules we run (AMPS-REFERENCE §1.8; §5.1: dead letters; §4:
replication downgrade and upgrade; §1.4: the journal lifecycle, both on a schedule)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal
from xml.etree.ElementTree import Element

from amps.config.model import ActionConfig, ActionStep, QueueConfig, TransactionLogConfig
from amps.config.reader import Reader
from amps.config.sections import parse_message_type, parse_publish_topic, parse_topic_name
from amps.config.topics import is_regex, topic_matches
from amps.config.units import duration

ON_SOW_EXPIRE = "amps-action-on-sow-expire-message"
ON_SCHEDULE = "amps-action-on-schedule"
DO_PUBLISH = "amps-action-do-publish-message"
DO_DOWNGRADE = "amps-action-do-downgrade-replication"
DO_UPGRADE = "amps-action-do-upgrade-replication"
DO_REMOVE_JOURNAL = "amps-action-do-remove-journal"
DO_ARCHIVE_JOURNAL = "amps-action-do-archive-journal"
DO_COMPRESS_JOURNAL = "amps-action-do-compress-journal"
# Journal module -> the lifecycle action it runs (amps.log.retention).
DO_JOURNAL_ACTIONS: dict[str, Literal["remove", "archive", "compress"]] = {
    DO_REMOVE_JOURNAL: "remove",
    DO_ARCHIVE_JOURNAL: "archive",
    DO_COMPRESS_JOURNAL: "compress",
}
ON_MODULES = (ON_SOW_EXPIRE, ON_SCHEDULE)
DO_MODULES = (DO_PUBLISH, DO_DOWNGRADE, DO_UPGRADE, *DO_JOURNAL_ACTIONS)
EXPIRE_REASONS = ("time_limit", "forced_expire", "max_cancels", "max_deliveries")
CONTEXT_VARIABLES = (
    "AMPS_TOPIC",
    "AMPS_DATA",
    "AMPS_DATA_LENGTH",
    "AMPS_CORRELATION_ID",
    "AMPS_REASON",
)
_PLACEHOLDER = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")


def _parse_reasons(text: str) -> str:
    reasons = [part.strip() for part in text.split(",")]
    if not reasons or any(reason not in EXPIRE_REASONS for reason in reasons):
        raise ValueError("a comma-separated list of " + ", ".join(EXPIRE_REASONS))
    return ",".join(reasons)


def _parse_data(text: str) -> str:
    for name in _PLACEHOLDER.findall(text):
        if name not in CONTEXT_VARIABLES:
            raise ValueError("{{...}} context variables among " + ", ".join(CONTEXT_VARIABLES))
    return text


_parse_interval_ms = duration(10**6, 10**6, "1ms", 10**15, "1000000s")


def _parse_interval(text: str) -> str:
    _parse_interval_ms(text)
    return text


def interval_ms(step: ActionStep, option: str) -> int:
    """A validated interval option (Every, Age) in milliseconds."""
    text = step.option(option)
    assert text is not None, (step.module, option)
    return _parse_interval_ms(text)


def _parse_age(text: str) -> str:
    """How old a journal's newest record must be for the action to take it (0s: any)."""
    duration(1_000, 0, "0s")(text)
    return text


# module -> option name -> (required, validator)
OptionRules = Mapping[str, tuple[bool, Callable[[str], str]]]
JOURNAL_OPTIONS: OptionRules = {"Age": (True, _parse_age)}
OPTION_RULES: dict[str, OptionRules] = {
    ON_SOW_EXPIRE: {
        "Topic": (True, parse_topic_name),
        "MessageType": (True, parse_message_type),
        "Reason": (False, _parse_reasons),
    },
    DO_PUBLISH: {
        "Topic": (True, parse_publish_topic),
        "MessageType": (True, parse_message_type),
        "Data": (True, _parse_data),
    },
    # AMPS-REFERENCE §4: a schedule driving replication downgrade and upgrade.
    ON_SCHEDULE: {"Every": (True, _parse_interval), "Name": (False, str)},
    DO_DOWNGRADE: {"Age": (True, _parse_interval)},
    DO_UPGRADE: {"Age": (True, _parse_interval)},
    **dict.fromkeys(DO_JOURNAL_ACTIONS, JOURNAL_OPTIONS),
}


@dataclass(frozen=True, slots=True)
class LocatedStep:
    step: ActionStep
    path: str


def parse_actions(
    reader: Reader, path: str, element: Element, log: TransactionLogConfig | None = None
) -> list[tuple[ActionConfig, list[LocatedStep]]]:
    fields = reader.children(element, path, repeated=("Action",))
    parsed: list[tuple[ActionConfig, list[LocatedStep]]] = []
    for action_path, action_element in fields.many("Action"):
        action_fields = reader.children(action_element, action_path, repeated=("On", "Do"))
        on = [_parse_step(reader, p, e, ON_MODULES) for p, e in action_fields.many("On")]
        do = [_parse_step(reader, p, e, DO_MODULES) for p, e in action_fields.many("Do")]
        for name, steps in (("On", on), ("Do", do)):
            if not steps:
                reader.error(f"{action_path}/{name}", None, f"at least one {name} element")
        found_on = [s for s in on if s is not None]
        found_do = [s for s in do if s is not None]
        _check_journal_steps(reader, found_do, log)
        action = ActionConfig(tuple(s.step for s in found_on), tuple(s.step for s in found_do))
        parsed.append((action, found_on))
    return parsed


def _parse_step(
    reader: Reader, path: str, element: Element, supported: tuple[str, ...]
) -> LocatedStep | None:
    fields = reader.children(element, path, single=("Module", "Options"))
    module = reader.required(fields, "Module", str, "a Module name")
    if module is None:
        return None
    if module not in supported:
        reader.error(f"{path}/Module", module, "a supported action module: " + ", ".join(supported))
        return None
    rules = OPTION_RULES[module]
    options: dict[str, str] = {}
    options_path = reader.path_of(fields, "Options")
    hit = fields.one("Options")
    written: set[str] = set()
    if hit is not None:
        option_fields = reader.children(hit[1], options_path, single=tuple(rules))
        written = {name for name in rules if option_fields.has(name)}
        for name, (_, validate) in rules.items():
            value = reader.optional(option_fields, name, validate)
            if value is not None:
                options[name] = value
        # Keep the file's order: an ordered mapping of what was written.
        order = [str(child.tag) for child in hit[1]]
        options = {name: options[name] for name in order if name in options}
    ok = True
    for name, (required, _) in rules.items():
        if required and name not in written:
            reader.error(f"{options_path}/{name}", None, f"option {name} of {module}")
            ok = False
    if not ok or any(name not in options for name in written):
        return None
    return LocatedStep(ActionStep(module, MappingProxyType(options)), path)


def _check_journal_steps(
    reader: Reader, do: list[LocatedStep], log: TransactionLogConfig | None
) -> None:
    """Journal actions need a transaction log; archiving needs JournalArchiveDirectory."""
    for located in do:
        module = located.step.module
        if module not in DO_JOURNAL_ACTIONS:
            continue
        if log is None:
            reader.error(f"{located.path}/Module", module, "a TransactionLog for journal actions")
        elif module == DO_ARCHIVE_JOURNAL and log.journal_archive_directory is None:
            reader.error(
                "AMPSConfig/TransactionLog/JournalArchiveDirectory",
                None,
                f"a JournalArchiveDirectory for {DO_ARCHIVE_JOURNAL} ({located.path})",
            )


def check_actions_against_queues(
    reader: Reader,
    parsed: list[tuple[ActionConfig, list[LocatedStep]]],
    queues: tuple[QueueConfig, ...],
) -> None:
    """§5.1: an on-expire action names queues (literally or by regex) of its message type."""
    for action, on_steps in parsed:
        _check_pairing(reader, action, on_steps)
        for located in on_steps:
            if located.step.module != ON_SOW_EXPIRE:
                continue
            topic = located.step.option("Topic") or ""
            message_type = located.step.option("MessageType")
            matched = [q for q in queues if topic_matches(topic, q.name)]
            topic_path = f"{located.path}/Options/Topic"
            if not matched:
                what = "a regex matching" if is_regex(topic) else "the Name of"
                reader.error(topic_path, topic, f"{what} a configured queue")
                continue
            wrong = [q.name for q in matched if q.message_type != message_type]
            if wrong:
                reader.error(
                    f"{located.path}/Options/MessageType",
                    message_type,
                    f"the MessageType of queue {wrong[0]!r}",
                )


# Which Do modules each On module can run.
RUNS: dict[str, tuple[str, ...]] = {
    ON_SOW_EXPIRE: (DO_PUBLISH,),
    ON_SCHEDULE: (DO_DOWNGRADE, DO_UPGRADE, *DO_JOURNAL_ACTIONS),
}


def _check_pairing(reader: Reader, action: ActionConfig, on_steps: list[LocatedStep]) -> None:
    for located in on_steps:
        allowed = RUNS[located.step.module]
        wrong = [do.module for do in action.do if do.module not in allowed]
        if wrong:
            reader.error(
                f"{located.path}/Module",
                located.step.module,
                f"an On module that runs {wrong[0]} (it runs " + ", ".join(allowed) + ")",
            )
