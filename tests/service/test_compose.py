"""compose.yaml and the Dockerfile agree with the CLI and the service (Docker cannot run here).

Every `writesafe` command in compose is parsed by the real typer/click command tree, so an option
that does not exist, a missing argument or a bad value fails here; ports, health checks,
environment and dependencies are checked against the service and against each other.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from sqlalchemy.engine import make_url
from typer.core import TyperGroup

from writesafe import WriteSafe, WriteSafeSettings
from writesafe.cli import app as cli_app
from writesafe.service import create_app

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose.yaml"
WRITESAFE_SERVICES = {"migrate", "api", "worker"}


def interpolate(value: Any) -> Any:
    """Compose's `${VAR:-default}` with nothing set: the default (compose.yaml uses no other)."""
    if isinstance(value, str):
        assert "$" not in re.sub(r"\$\{[A-Z_]+:-[^}]*\}", "", value), value
        return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", value)
    if isinstance(value, list):
        return [interpolate(v) for v in value]
    if isinstance(value, dict):
        return {k: interpolate(v) for k, v in value.items()}
    return value


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded = interpolate(yaml.safe_load(COMPOSE.read_text()))
    assert isinstance(loaded, dict)
    return loaded


def parse(args: list[str]) -> tuple[Any, Any]:
    """Parse `writesafe <args>` as the console script would, without running it: the command
    reached and its parsed context (typer's click raises for anything the CLI does not accept)."""
    command: Any = typer.main.get_command(cli_app)
    context = typer.Context(command, info_name="writesafe")
    while isinstance(command, TyperGroup):
        name, sub, args = command.resolve_command(context, args)
        assert name is not None
        assert sub is not None
        command, context = sub, typer.Context(sub, info_name=name, parent=context)
    return command, command.make_context(context.info_name, list(args), parent=context.parent)


def test_the_services_are_the_stores_the_migration_the_api_and_the_workers(
    compose: dict[str, Any],
) -> None:
    assert set(compose["services"]) == {"postgres", "redis", *WRITESAFE_SERVICES}
    for name in WRITESAFE_SERVICES:
        assert compose["services"][name]["build"] == "."


def test_every_writesafe_command_parses_with_the_real_cli(compose: dict[str, Any]) -> None:
    services = compose["services"]
    commands = {name: parse(services[name]["command"]) for name in WRITESAFE_SERVICES}
    assert commands["migrate"][0].name == "upgrade"
    serve, serve_args = commands["api"]
    assert serve.name == "serve"
    assert re.fullmatch(r"[\w.]+:\w+", serve_args.params["app"])
    assert serve_args.params["host"] == "0.0.0.0"
    reconcile, reconcile_args = commands["worker"]
    assert reconcile.name == "reconcile"
    assert reconcile_args.params["watch"] is True
    assert reconcile_args.params["app"] == serve_args.params["app"]


def test_the_documented_commands_parse_too() -> None:
    # compose.yaml's header shows how to create the first key; it must be a real command.
    documented = [
        line.split("migrate", 1)[1].split()
        for line in COMPOSE.read_text().splitlines()
        if line.startswith("#") and "compose run --rm migrate" in line
    ]
    assert documented
    for args in documented:
        command, context = parse(args)
        assert command.name == "create"
        assert context.params["role"].value == "operator"


def test_a_wrong_command_would_be_caught() -> None:
    # The check above is only worth something if it fails for commands the CLI does not have.
    with pytest.raises(typer.TyperException, match="--listen"):
        parse(["serve", "app:ws", "--listen", "0.0.0.0"])
    with pytest.raises(typer.TyperException, match=r"(?i)app"):
        parse(["reconcile", "--watch"])
    with pytest.raises(typer.BadParameter):
        parse(["serve", "app:ws", "--port", "eighty"])
    with pytest.raises(typer.TyperException):
        parse(["keys", "rotate"])


def test_ports_and_health_checks_agree_with_the_service(compose: dict[str, Any]) -> None:
    api = compose["services"]["api"]
    _, serve_args = parse(api["command"])
    port = serve_args.params["port"]
    assert api["ports"] == [f"{port}:{port}"]
    probe = " ".join(api["healthcheck"]["test"])
    url = re.search(r"http://127\.0\.0\.1:(\d+)(/\w+)", probe)
    assert url is not None
    assert int(url.group(1)) == port
    probed = create_app(WriteSafe()).openapi()["paths"][url.group(2)]["get"]
    assert url.group(2) == "/readyz"
    assert "security" not in probed  # the probe has no key
    for name in ("postgres", "redis", "api"):
        assert compose["services"][name]["healthcheck"]["test"][0] == "CMD"
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert f"EXPOSE {port}" in dockerfile


def test_dependencies_wait_for_health_and_for_the_migration(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert services["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert services["migrate"]["restart"] == "no"
    for name in ("api", "worker"):
        depends = services[name]["depends_on"]
        assert depends["migrate"] == {"condition": "service_completed_successfully"}
        assert depends["redis"] == {"condition": "service_healthy"}
    for name, service in services.items():
        for dependency, rule in service.get("depends_on", {}).items():
            if rule["condition"] == "service_healthy":
                assert "healthcheck" in services[dependency], (name, dependency)


def test_the_environment_is_what_writesafe_reads_and_points_at_the_stores(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    prefix = WriteSafeSettings.model_config["env_prefix"]
    known = {f"{prefix}{field}".upper() for field in WriteSafeSettings.model_fields}
    for name in WRITESAFE_SERVICES:
        env = services[name]["environment"]
        assert set(env) <= known, set(env) - known
        database = make_url(env["WRITESAFE_DATABASE_URL"])
        postgres = services["postgres"]["environment"]
        assert database.drivername == "postgresql+asyncpg"
        assert (database.host, database.port) == ("postgres", 5432)
        assert database.username == postgres["POSTGRES_USER"]
        assert database.password == postgres["POSTGRES_PASSWORD"]
        assert database.database == postgres["POSTGRES_DB"]
        assert env["WRITESAFE_REDIS_URL"].startswith("redis://redis:6379/")
        settings = WriteSafeSettings(**{k.removeprefix(prefix).lower(): v for k, v in env.items()})
        assert settings.redis_url == env["WRITESAFE_REDIS_URL"]


def test_the_image_runs_the_console_script() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["writesafe"]' in dockerfile
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["writesafe"] == "writesafe.cli:main"
    assert re.search(r"^RUN pip install \.", dockerfile, re.MULTILINE)
    assert re.search(r"^USER (?!root)\w+", dockerfile, re.MULTILINE)
