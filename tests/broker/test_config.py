import pytest

from magnetar.broker.config import BrokerConfig


def test_defaults_are_documented_values():
    config = BrokerConfig()
    assert config.max_message_size == 5 * 1024 * 1024
    assert config.fsync_policy == "always"
    assert config.port == 6650


def test_toml_then_overrides(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text('port = 7000\nfsync_policy = "never"\ndata_dir = "/tmp/x"\n')
    config = BrokerConfig.load(path, port=7001, host=None)
    assert config.port == 7001
    assert config.fsync_policy == "never"
    assert str(config.data_dir) == "/tmp/x"
    assert config.host == "127.0.0.1"


def test_unknown_and_invalid_settings_are_errors(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text("no_such_setting = 1\n")
    with pytest.raises(ValueError, match="no_such_setting"):
        BrokerConfig.load(path)
    with pytest.raises(ValueError, match="fsync_policy"):
        BrokerConfig.load(None, fsync_policy="sometimes")
