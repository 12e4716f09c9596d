"""The settings door: every value, from an argument or a WRITESAFE_* variable, is checked when the
WriteSafe is made, and a bad one is one line naming the setting (the CLI: that line, exit 2); a
tool's options are checked when it is registered."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from writesafe import WriteSafe, WriteSafeSettings
from writesafe.cli import app
from writesafe.idempotency._settings import SettingsRefused


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}"


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"lease_seconds": -1}, "lease_seconds (WRITESAFE_LEASE_SECONDS): Input should be greater"),
        ({"wait_timeout": -5}, "wait_timeout (WRITESAFE_WAIT_TIMEOUT): Input should be greater"),
        ({"redis_url": "http://user:secret@cache:6379"}, "a Redis URL starts with redis://"),
    ],
)
def test_an_argument_out_of_range_is_refused_naming_its_setting(
    url: str, options: dict[str, object], says: str
) -> None:
    """An argument used to be copied over the settings unchecked: a negative lease was taken."""
    with pytest.raises(SettingsRefused, match=r"^[a-z_]+ \(WRITESAFE_[A-Z_]+\): ") as refused:
        WriteSafe(url, **options)  # type: ignore[arg-type]
    assert says in str(refused.value)
    assert "secret" not in str(refused.value)  # a URL's password is not repeated


def test_a_bad_variable_is_one_line_and_exit_2(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value, says in [
        ("WRITESAFE_LEASE_SECONDS", "-1", "lease_seconds (WRITESAFE_LEASE_SECONDS)"),
        ("WRITESAFE_REDIS_URL", "http://cache:6379", "redis_url (WRITESAFE_REDIS_URL)"),
    ]:
        with monkeypatch.context() as env:
            env.setenv(name, value)
            result = CliRunner().invoke(app, ["db", "current", "--database-url", url])
        assert result.exit_code == 2, result.output
        assert result.output.count("\n") == 1
        assert result.output.startswith(f"error: {says}: ")


def test_arguments_win_over_variables_and_a_given_settings_object(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WRITESAFE_LEASE_SECONDS", "20")
    assert WriteSafe(url).settings.lease_seconds == 20
    assert WriteSafe(url, lease_seconds=3).settings.lease_seconds == 3
    given = WriteSafeSettings(lease_seconds=7, wait_timeout=2)
    assert (WriteSafe(url, settings=given).settings.lease_seconds, given.wait_timeout) == (7, 2)
    made = WriteSafe(url, settings=given, lease_seconds=4).settings
    assert (made.lease_seconds, made.wait_timeout) == (4, 2)


def test_the_service_settings_are_checked_too(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`writesafe serve` refuses a bad WRITESAFE_SERVICE_* value in one line before it serves."""
    monkeypatch.setenv("WRITESAFE_DATABASE_URL", url)
    monkeypatch.setenv("WRITESAFE_SERVICE_MAX_BODY_BYTES", "-3")
    result = CliRunner().invoke(app, ["serve", "tests.apps.console_app:ws", "--port", "1"])
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1
    says = "max_body_bytes (WRITESAFE_SERVICE_MAX_BODY_BYTES): Input should be greater"
    assert result.output.startswith(f"error: {says}")


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"max_executions": 0}, "max_executions counts the first execution"),
        ({"timeout": 0}, "timeout must be positive"),
        ({"settle_after": -1}, "settle_after must not be negative"),
        ({"lookup_timeout": 0}, "lookup_timeout must be positive"),
        ({"wait_timeout": -1}, "wait_timeout must not be negative"),
    ],
)
def test_a_tool_option_out_of_range_is_refused_at_registration(
    url: str, options: dict[str, object], says: str
) -> None:
    ws = WriteSafe(url)
    with pytest.raises(ValueError, match=says):
        ws.tool("submit", **options)  # type: ignore[arg-type]

    @ws.tool("submit")  # nothing was half-registered: the name is still free
    async def submit(n: int) -> int:
        return n

    assert submit.name == "submit"
