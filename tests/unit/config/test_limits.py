"""Names are bounded; a file that is not UTF-8 text is a configuration error (issue 11, item 5)."""

from __future__ import annotations

import os

import pytest

from amps.config import ConfigErrors, load_config
from amps.config.load import MAX_CONFIG_BYTES, decode_config
from amps.names import MAX_NAME_LENGTH, MAX_TOPIC_LENGTH

from .helpers import assert_error, document, errors_of, queue_document

FIFTY_MB = 50 * 1024 * 1024


def test_a_50mb_instance_name_is_refused_with_a_short_message() -> None:
    (error,) = errors_of(document("", name=f"<Name>{'x' * FIFTY_MB}</Name>"))
    assert error.path == "AMPSConfig/Name"
    assert f"at most {MAX_NAME_LENGTH} characters" in error.expected
    # The message quotes the start of the value, not 50 MB of it.
    assert len(error.message) < 500
    assert f"{FIFTY_MB} characters" in error.message


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ("<Group>{}</Group>", "AMPSConfig/Group"),
        (
            "<Transports><Transport><Name>{}</Name><Type>grpc</Type>"
            "<InetAddr>9007</InetAddr></Transport></Transports>",
            "AMPSConfig/Transports/Transport[1]/Name",
        ),
    ],
)
def test_group_and_transport_names_are_bounded(body: str, path: str) -> None:
    assert_error(document(body.format("g" * (MAX_NAME_LENGTH + 1))), path, "at most 256")
    load_config(document(body.format("g" * MAX_NAME_LENGTH)))


def test_queue_and_topic_names_are_bounded() -> None:
    long_name = "q" * (MAX_TOPIC_LENGTH + 1)
    assert_error(
        queue_document(f"<Name>{long_name}</Name>"),
        "AMPSConfig/SOW/Queue[1]/Name",
        f"at most {MAX_TOPIC_LENGTH} characters",
    )
    log = (
        "<TransactionLog><JournalDirectory>j</JournalDirectory>"
        f"<Topic><Name>{long_name}</Name><MessageType>json</MessageType></Topic>"
        "</TransactionLog>"
    )
    assert_error(
        document("", log=log),
        "AMPSConfig/TransactionLog/Topic[1]/Name",
        f"at most {MAX_TOPIC_LENGTH} characters",
    )


def test_a_control_character_in_a_name_is_refused() -> None:
    assert_error(document("", name="<Name>a&#x7f;b</Name>"), "AMPSConfig/Name", "control")


def test_random_bytes_are_a_configuration_error_naming_the_byte() -> None:
    data = b"\xfd\x00" + os.urandom(200)
    with pytest.raises(ConfigErrors) as caught:
        decode_config(data)
    (error,) = caught.value.errors
    assert error.path == "(document)"
    assert error.value == "byte 0xfd at offset 0"
    assert "UTF-8" in error.expected


def test_a_byte_order_mark_is_allowed() -> None:
    text = decode_config(b"\xef\xbb\xbf" + document("").encode())
    assert load_config(text).name == "amps-1"


def test_a_file_larger_than_the_limit_is_refused_before_decoding() -> None:
    with pytest.raises(ConfigErrors) as caught:
        decode_config(b" " * (MAX_CONFIG_BYTES + 1))
    assert "at most 4MB" in caught.value.errors[0].expected
