"""Which of ``embedded_broker``'s settings go to the TOML file and which become flags (no broker)."""

from __future__ import annotations

import pytest

from magnetar.testing import split_settings


def test_broker_settings_go_to_the_file_and_addresses_to_the_command_line():
    toml, flags = split_settings({"max_message_size": 1024, "port": 6651, "http_port": 0, "host": "::1"})
    assert toml == {"max_message_size": 1024}
    assert flags == {"port": 6651, "http_port": 0, "host": "::1"}


def test_no_settings_means_an_empty_file_and_no_flags():
    assert split_settings({}) == ({}, {})


def test_a_data_dir_is_refused_since_the_embedded_one_is_deleted():
    with pytest.raises(TypeError, match="data_dir"):
        split_settings({"data_dir": "/srv/magnetar"})
