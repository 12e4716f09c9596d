"""compose.yaml and the Dockerfile agree with the CLI and the service (Docker cannot run here).

Every `writesafe` command in compose is parsed by the real typer/click command tree, so an option
that does not exist, a missing argument or a bad value fails here; ports, health checks,
environment and dependencies are checked against the service and against each other.
"""

from __future__ import annotations

import functools
import json
import re
import secrets
import subprocess
import sys
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
from writesafe.service import ServiceSettings, create_app

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose.yaml"
ENV_EXAMPLE = ROOT / ".env.example"
WRITESAFE_SERVICES = {"migrate", "api", "worker"}  # those that run the writesafe CLI
EXAMPLE_SERVICES = {"orders", "shop"}  # the default app's order service, and the shop itself
VARIABLE = re.compile(r"\$\{(?P<name>[A-Z_]+)(?::-(?P<default>[^}]*)|:\?(?P<error>[^}]*))\}")
PASSWORD = secrets.token_hex(16)  # what a user puts in .env: the repository has none
CURSOR_SECRET = secrets.token_hex(16)  # the same
SECRETS = {"POSTGRES_PASSWORD": PASSWORD, "WRITESAFE_SERVICE_CURSOR_SECRET": CURSOR_SECRET}


def documented() -> dict[str, str]:
    """.env.example's variables: `NAME=value` to set, `# NAME=default` documenting a default."""
    found = re.findall(r"^(?:# )?([A-Z_]+)=(.*)$", ENV_EXAMPLE.read_text(), re.MULTILINE)
    return dict(found)


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's `${VAR:-default}` and `${VAR:?error}` (compose.yaml uses no other), from `env`."""
    if isinstance(value, str):
        assert "$" not in VARIABLE.sub("", value), value

        def substitute(match: re.Match[str]) -> str:
            if match["name"] in env:
                return env[match["name"]]
            assert match["error"] is None, f"compose refuses to start: {match['error']}"
            return str(match["default"])

        return VARIABLE.sub(substitute, value)
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    return value


def load(env: dict[str, str]) -> dict[str, Any]:
    loaded = interpolate(yaml.safe_load(COMPOSE.read_text()), env)
    assert isinstance(loaded, dict)
    return loaded


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    """compose.yaml as `docker compose up` sees it with a .env that sets just the two secrets."""
    return load(SECRETS)


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


def test_the_services_are_the_stores_the_migration_the_api_the_workers_and_the_example(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    assert set(services) == {"postgres", "redis", *WRITESAFE_SERVICES, *EXAMPLE_SERVICES}
    for name in WRITESAFE_SERVICES | EXAMPLE_SERVICES:
        assert services[name]["build"] == "."


def test_no_secret_is_in_the_file_and_every_setting_is_documented() -> None:
    raw = yaml.safe_load(COMPOSE.read_text())
    assert raw["services"]["postgres"]["environment"]["POSTGRES_PASSWORD"].startswith(
        "${POSTGRES_PASSWORD:?"
    )
    with pytest.raises(AssertionError, match="set POSTGRES_PASSWORD"):
        load({})  # no default password: compose refuses to start without one
    with pytest.raises(AssertionError, match="set WRITESAFE_SERVICE_CURSOR_SECRET"):
        load({"POSTGRES_PASSWORD": PASSWORD})  # nor without the cursor secret
    defaults = documented()
    for match in VARIABLE.finditer(COMPOSE.read_text()):
        assert match["name"] in defaults, f"{match['name']} is not in .env.example"
        if match["default"] is not None:
            assert defaults[match["name"]] == match["default"], match["name"]
    assert defaults["POSTGRES_PASSWORD"] == defaults["WRITESAFE_SERVICE_CURSOR_SECRET"] == ""
    ignored = (
        (ROOT / ".gitignore").read_text().split(),
        (ROOT / ".dockerignore").read_text().split(),
    )
    assert all(".env" in names for names in ignored)  # neither committed nor baked into the image


def test_the_example_services_run_modules_of_the_repository(compose: dict[str, Any]) -> None:
    """Each example service runs `uvicorn module:app` on the port it publishes, and the module
    imports (with that service's environment) and has the app."""
    for name in EXAMPLE_SERVICES:
        service = compose["services"][name]
        assert service["entrypoint"] == ["uvicorn"]
        target, *options = service["command"]
        assert options[:2] == ["--host", "0.0.0.0"]
        port = options[options.index("--port") + 1]
        assert service["ports"] == [f"127.0.0.1:{port}:{port}"]
        module = target.split(":")[0]
        assert (ROOT / Path(*module.split("."))).with_suffix(".py").is_file(), module
        imported = imports(target, service.get("environment", {}))
        assert imported["type"] == "FastAPI"


def test_the_default_app_writes_to_and_looks_orders_up_at_the_compose_order_service(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    orders = services["orders"]["command"]
    port = orders[orders.index("--port") + 1]
    _, serve_args = parse(services["api"]["command"])
    assert serve_args.params["app"] == "examples.orders.shop:ws"
    for name in ("api", "worker", "shop"):
        imported = imports(serve_args.params["app"], services[name]["environment"])
        assert imported["type"] == "WriteSafe"
        assert imported["downstream"] == f"http://orders:{port}"
        assert {"place_order", "refund_order"} <= set(imported["lookups"])
    # Their lookups need it answering; only the demo's shop needs it running at all (the API and
    # the workers of your own app start without the demo profile).
    for name in ("api", "worker"):
        assert services[name]["depends_on"]["orders"] == {
            "condition": "service_healthy",
            "required": False,
        }
    assert services["shop"]["depends_on"]["orders"] == {"condition": "service_healthy"}
    assert "healthcheck" in services["orders"]


def imports(target: str, environment: dict[str, str]) -> dict[str, Any]:
    """Import `module:attribute` as the container would: a fresh interpreter in the repository
    root with the service's environment (the example reads its downstream URL at import)."""
    return dict(_imported(target, tuple(sorted(environment.items()))))


@functools.cache
def _imported(target: str, environment: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    script = f"""
import importlib, json, sys
module, attribute = {target!r}.split(":")
loaded = importlib.import_module(module)
value = getattr(loaded, attribute)
json.dump({{
    "type": type(value).__name__,
    "downstream": getattr(loaded, "DOWNSTREAM_URL", None),
    "lookups": sorted(getattr(value, "lookups", {{}})),
}}, sys.stdout)
"""
    env = {"PATH": "/usr/bin:/bin", **dict(environment)}
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    loaded: dict[str, Any] = json.loads(done.stdout)
    return loaded


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
    assert api["ports"] == [f"127.0.0.1:{port}:{port}"]  # plain HTTP: TLS goes in front
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
    service_prefix = ServiceSettings.model_config["env_prefix"]
    known |= {f"{service_prefix}{field}".upper() for field in ServiceSettings.model_fields}
    shop = (ROOT / "examples" / "orders" / "shop.py").read_text()
    for name in (*WRITESAFE_SERVICES, "shop"):
        env = services[name]["environment"]
        ours = {k for k in env if k.startswith(prefix.upper())}
        assert ours <= known, ours - known
        assert all(f'"{k}"' in shop for k in set(env) - ours)  # the rest the example reads
        database = make_url(env["WRITESAFE_DATABASE_URL"])
        postgres = services["postgres"]["environment"]
        assert database.drivername == "postgresql+asyncpg"
        assert (database.host, database.port) == ("postgres", 5432)
        assert database.username == postgres["POSTGRES_USER"]
        assert database.password == postgres["POSTGRES_PASSWORD"] == PASSWORD
        assert database.database == postgres["POSTGRES_DB"]
        assert env["WRITESAFE_REDIS_URL"].startswith("redis://redis:6379/")
        settings = WriteSafeSettings(
            **{
                k.removeprefix(prefix).lower(): v
                for k, v in env.items()
                if k in ours and not k.startswith(service_prefix)
            }
        )
        assert settings.redis_url == env["WRITESAFE_REDIS_URL"]


def test_the_image_runs_the_console_script() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["writesafe"]' in dockerfile
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["writesafe"] == "writesafe.cli:main"
    # The image installs the wheel its build stage made (tests/test_packaging.py checks that
    # wheel), not the checkout.
    assert re.search(r"^FROM \S+ AS build$", dockerfile, re.MULTILINE)
    assert re.search(r"python -m build --outdir /dist", dockerfile)
    wheel_with_service = r'^RUN pip install "\$\(echo /tmp/\*\.whl\)\[service\]"'  # serve's extra
    assert re.search(wheel_with_service, dockerfile, re.MULTILINE)
    assert re.search(r"^USER (?!root)\w+", dockerfile, re.MULTILINE)


def test_redis_is_bounded_and_evicts_as_the_operations_guide_says(compose: dict[str, Any]) -> None:
    command = compose["services"]["redis"]["command"]
    assert command[0] == "redis-server"
    options = dict(zip(command[1::2], command[2::2], strict=True))
    assert re.fullmatch(r"\d+(kb|mb|gb)", options["--maxmemory"]), options
    # The guide's advice names the policies that evict cached answers and never refuse a lease.
    guide = (ROOT / "docs" / "operations.md").read_text()
    advice = re.search(r"^- Set `maxmemory`.*?(?=^- )", guide, re.DOTALL | re.MULTILINE)
    assert advice is not None
    assert f"**`{options['--maxmemory-policy']}`**" in advice.group()
    assert options["--maxmemory-policy"] != "noeviction"


def test_every_api_replica_seals_cursors_with_the_one_secret(
    compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    environment = compose["services"]["api"]["environment"]
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    secret = ServiceSettings().cursor_secret  # the service reads it under that name
    assert secret is not None
    assert secret.get_secret_value() == CURSOR_SECRET


def test_the_example_is_a_demo_profile_and_its_fake_service_holds_no_secret(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    for name, service in services.items():
        assert service.get("profiles") == (["demo"] if name in EXAMPLE_SERVICES else None), name
    orders = json.dumps(services["orders"])
    assert "WRITESAFE_" not in orders
    assert all(secret not in orders for secret in SECRETS.values())
    for name, service in services.items():  # a plain-HTTP port reaches this host alone
        assert all(port.startswith("127.0.0.1:") for port in service.get("ports", [])), name


def test_the_code_is_installed_by_root_and_run_by_another_user() -> None:
    """The runtime user reads the installed code and /app, and can change neither: root installs
    and copies everything, and the user is switched to after the last step."""
    runtime = re.split(r"^FROM ", (ROOT / "Dockerfile").read_text(), flags=re.MULTILINE)[-1]
    steps = [line.split()[0] for line in runtime.splitlines() if re.match(r"[A-Z]+ ", line)]
    assert steps.count("USER") == 1
    changes = [i for i, step in enumerate(steps) if step in {"RUN", "COPY", "ADD"}]
    assert steps.index("USER") > max(changes)
    assert re.search(r"^USER (?!root\b)\w+$", runtime, re.MULTILINE)
    assert not re.search(r"chown|chmod|--chmod", runtime)
