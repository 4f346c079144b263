"""Checks docker-compose.yml, .env.example, .dockerignore and the Dockerfile without Docker."""

from __future__ import annotations

import copy
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
COMPOSE_FILE = ROOT / "docker-compose.yml"
ENV_EXAMPLE = ROOT / ".env.example"
DOCKERIGNORE = ROOT / ".dockerignore"
DOCKERFILE = "infra/docker/Dockerfile"
SCHEMA_FILE = HERE / "compose-spec.json"

ALL_SERVICES = {"api", "worker", "replay-worker", "beat", "redis", "qdrant", "postgres", "flower"}
# Services that run tiermem code and so need its settings.
TIERMEM_SERVICES = ("migrate", "api", "worker", "replay-worker", "beat")
# Services built from our image (flower runs `celery flower` from it).
OUR_IMAGE_SERVICES = (*TIERMEM_SERVICES, "flower")
CONNECTION_VARS = ("TIERMEM_DATABASE_URL", "TIERMEM_REDIS_URL", "TIERMEM_QDRANT__URL")

# ${NAME}, ${NAME:-default}, ${NAME:?error}...; "$$" is compose's escaped literal "$".
INTERPOLATION = re.compile(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)")
TIERMEM_VAR = re.compile(r"\bTIERMEM_[A-Z0-9_]*[A-Z0-9]\b")


@pytest.fixture(name="compose_text", scope="module")
def compose_text_fixture() -> str:
    return COMPOSE_FILE.read_text(encoding="utf-8")


@pytest.fixture(name="compose", scope="module")
def compose_fixture(compose_text: str) -> dict[str, Any]:
    # safe_load resolves the x-* anchors and `<<` merge keys, as compose does.
    data = yaml.safe_load(compose_text)
    assert isinstance(data, dict)
    return data


@pytest.fixture(name="services", scope="module")
def services_fixture(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    services = compose["services"]
    assert isinstance(services, dict)
    return services


@pytest.fixture(name="validator", scope="module")
def validator_fixture() -> Draft202012Validator:
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


@pytest.fixture(name="env_example_names", scope="module")
def env_example_names_fixture() -> set[str]:
    """Names assigned in .env.example, whether the line is active or commented out."""
    names = set()
    for line in ENV_EXAMPLE.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^#?\s*([A-Za-z_][A-Za-z0-9_]*)=", line)
        if match:
            names.add(match.group(1))
    return names


def _environment(service: dict[str, Any]) -> dict[str, Any]:
    env = service.get("environment", {})
    if isinstance(env, list):  # the "KEY=value" list form
        return dict(item.split("=", 1) if "=" in item else (item, None) for item in env)
    assert isinstance(env, dict)
    return env


def _depends_on(service: dict[str, Any]) -> dict[str, dict[str, Any]]:
    deps = service.get("depends_on", {})
    if isinstance(deps, list):  # short form: plain names, condition service_started
        return {name: {"condition": "service_started"} for name in deps}
    assert isinstance(deps, dict)
    return deps


# --- the Compose Specification --------------------------------------------------------


def test_vendored_schema_matches_its_recorded_checksum() -> None:
    readme = (HERE / "README.md").read_text(encoding="utf-8")
    recorded = re.search(r"sha256 ([0-9a-f]{64})", readme)
    assert recorded, "tests/infra/README.md must record the schema's sha256"
    assert hashlib.sha256(SCHEMA_FILE.read_bytes()).hexdigest() == recorded.group(1)


def test_compose_file_is_valid_against_the_compose_spec(
    validator: Draft202012Validator, compose: dict[str, Any]
) -> None:
    errors = sorted(validator.iter_errors(compose), key=lambda e: list(e.absolute_path))
    report = "\n".join(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors)
    assert not errors, report


@pytest.mark.parametrize(
    ("where", "key", "value"),
    [
        ("api", "ports", "8000"),  # must be a list
        ("api", "no_such_key", True),  # unknown service key
        ("worker", "deploy", {"replicas": [3]}),  # wrong type
    ],
)
def test_schema_rejects_a_broken_compose_file(
    validator: Draft202012Validator, compose: dict[str, Any], where: str, key: str, value: Any
) -> None:
    # Guards against a schema (or validator) that accepts anything.
    broken = copy.deepcopy(compose)
    broken["services"][where][key] = value
    assert list(validator.iter_errors(broken))


# --- the structure tiermem relies on ---------------------------------------------------


def test_every_expected_service_exists(services: dict[str, dict[str, Any]]) -> None:
    assert ALL_SERVICES | {"migrate"} <= set(services)


@pytest.mark.parametrize("name", TIERMEM_SERVICES)
def test_tiermem_services_get_connection_urls_and_production_mode(
    services: dict[str, dict[str, Any]], name: str
) -> None:
    env = _environment(services[name])
    for var in CONNECTION_VARS:
        assert env.get(var), f"{name} lacks {var}"
    assert env["TIERMEM_DATABASE_URL"].startswith("postgresql+psycopg://")
    assert "@postgres:5432/" in env["TIERMEM_DATABASE_URL"]
    assert env["TIERMEM_REDIS_URL"].startswith("redis://redis:6379")
    assert env["TIERMEM_QDRANT__URL"] == "http://qdrant:6333"
    assert env.get("TIERMEM_ENVIRONMENT") == "production"
    assert services[name].get("env_file"), f"{name} must read secrets from .env"


def test_secrets_are_interpolated_not_written(services: dict[str, dict[str, Any]]) -> None:
    env = _environment(services["api"])
    for var in ("TIERMEM_SECRET_KEY", "TIERMEM_AUTH__ADMIN_KEY"):
        assert str(env[var]).startswith(f"${{{var}:?"), f"{var} must be required from .env"
    assert "${POSTGRES_PASSWORD:?" in env["TIERMEM_DATABASE_URL"]
    assert str(_environment(services["postgres"])["POSTGRES_PASSWORD"]).startswith(
        "${POSTGRES_PASSWORD:?"
    )


@pytest.mark.parametrize("name", ["worker", "replay-worker", "beat", "migrate"])
def test_background_services_publish_no_ports(
    services: dict[str, dict[str, Any]], name: str
) -> None:
    assert "ports" not in services[name]


@pytest.mark.parametrize("name", ["redis", "postgres"])
def test_datastores_without_auth_are_not_published(
    services: dict[str, dict[str, Any]], name: str
) -> None:
    assert "ports" not in services[name]


def test_published_ports(services: dict[str, dict[str, Any]]) -> None:
    assert "8000:8000" in services["api"]["ports"]
    assert any(str(p).endswith("5555:5555") for p in services["flower"]["ports"])
    assert any(str(p).endswith("6333:6333") for p in services["qdrant"]["ports"])


def test_every_depends_on_target_exists(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        for target in _depends_on(service):
            assert target in services, f"{name} depends on missing service {target}"


@pytest.mark.parametrize("name", ["api", "worker", "replay-worker", "beat"])
def test_long_running_roles_wait_for_healthy_stores_and_migrations(
    services: dict[str, dict[str, Any]], name: str
) -> None:
    deps = _depends_on(services[name])
    for store in ("postgres", "redis", "qdrant"):
        assert deps[store]["condition"] == "service_healthy", (name, store)
    assert deps["migrate"]["condition"] == "service_completed_successfully"


def test_migrate_is_one_shot(services: dict[str, dict[str, Any]]) -> None:
    migrate = services["migrate"]
    assert migrate["command"] == ["tiermem", "migrate"]
    assert migrate["restart"] == "no"
    assert _depends_on(migrate)["postgres"]["condition"] == "service_healthy"
    # Only the one-shot migrates: replicas starting together must not race alembic.
    assert str(_environment(services["api"])["TIERMEM_DATABASE__AUTO_MIGRATE"]) == "false"


@pytest.mark.parametrize("name", ["postgres", "redis", "qdrant"])
def test_datastores_have_healthchecks(services: dict[str, dict[str, Any]], name: str) -> None:
    check = services[name]["healthcheck"]
    assert check["test"] and not check.get("disable")


@pytest.mark.parametrize("name", ["postgres", "qdrant", "redis"])
def test_datastores_keep_their_data_in_named_volumes(
    compose: dict[str, Any], services: dict[str, dict[str, Any]], name: str
) -> None:
    volume = str(services[name]["volumes"][0]).split(":", 1)[0]
    assert volume in compose["volumes"]


def test_image_versions(services: dict[str, dict[str, Any]]) -> None:
    assert services["redis"]["image"].startswith("redis:7")
    assert services["postgres"]["image"].startswith("postgres:16")
    assert services["qdrant"]["image"].startswith("qdrant/qdrant")


@pytest.mark.parametrize("name", OUR_IMAGE_SERVICES)
def test_our_services_build_from_the_dockerfile(
    services: dict[str, dict[str, Any]], name: str
) -> None:
    build = services[name]["build"]
    assert isinstance(build, dict)
    assert build["dockerfile"] == DOCKERFILE
    assert (ROOT / build["context"] / build["dockerfile"]).is_file()
    assert services[name]["image"] == services["api"]["image"]


def test_worker_commands(services: dict[str, dict[str, Any]]) -> None:
    worker = services["worker"]["command"]
    assert worker[:2] == ["tiermem", "worker"]
    # maintenance: beat's outbox sweeps, which would pile up unseen without a consumer
    assert worker[worker.index("--queues") + 1] == "extract,compress,maintenance"
    # Scaling with --scale or deploy.replicas needs no fixed container name.
    assert "container_name" not in services["worker"]
    replay = services["replay-worker"]["command"]
    assert replay[replay.index("--queues") + 1] == "replay"
    assert replay[replay.index("--concurrency") + 1] == "4"
    assert services["beat"]["command"] == ["tiermem", "beat"]
    assert services["beat"].get("deploy", {}).get("replicas", 1) == 1
    assert services["api"]["command"] == ["tiermem", "api"]


def test_flower_runs_from_our_image_against_the_broker(
    services: dict[str, dict[str, Any]],
) -> None:
    flower = services["flower"]
    command = flower["command"]
    assert command[0] == "celery" and "flower" in command
    broker = next(arg for arg in command if arg.startswith("--broker="))
    assert broker.removeprefix("--broker=") == _environment(services["api"])["TIERMEM_REDIS_URL"]
    assert "--port=5555" in command
    assert str(_environment(flower)["FLOWER_BASIC_AUTH"]).startswith("${FLOWER_BASIC_AUTH:?")


@pytest.mark.parametrize("name", ["worker", "replay-worker", "beat", "migrate"])
def test_roles_without_http_switch_off_the_image_healthcheck(
    services: dict[str, dict[str, Any]], name: str
) -> None:
    # The image's HEALTHCHECK probes :8000/healthz, which only the api serves.
    assert services[name]["healthcheck"] == {"disable": True}


# --- .env.example --------------------------------------------------------------------


def test_env_example_names_every_tiermem_variable_in_compose(
    compose_text: str, env_example_names: set[str]
) -> None:
    used = set(TIERMEM_VAR.findall(compose_text))
    assert used, "expected TIERMEM_ variables in docker-compose.yml"
    assert not used - env_example_names, sorted(used - env_example_names)


def test_env_example_names_every_interpolated_variable(
    compose_text: str, env_example_names: set[str]
) -> None:
    used = set(INTERPOLATION.findall(compose_text))
    assert not used - env_example_names, sorted(used - env_example_names)


def test_env_example_holds_no_secret_values() -> None:
    text = ENV_EXAMPLE.read_text(encoding="utf-8")
    for var in ("TIERMEM_SECRET_KEY", "TIERMEM_AUTH__ADMIN_KEY", "POSTGRES_PASSWORD"):
        # Active and empty: `cp .env.example .env` then fails loudly until it is filled in.
        assert re.search(rf"^{var}=$", text, flags=re.MULTILINE), var
    assert re.search(r"^FLOWER_BASIC_AUTH=$", text, flags=re.MULTILINE)


def test_every_tiermem_variable_is_a_real_setting(
    compose_text: str, env_example_names: set[str]
) -> None:
    # A typo (TIERMEM_QDRANT_URL for TIERMEM_QDRANT__URL) would be silently ignored.
    config = pytest.importorskip("shared.config")
    names = set(TIERMEM_VAR.findall(compose_text)) | {
        n for n in env_example_names if n.startswith("TIERMEM_")
    }
    for name in sorted(names):
        model = config.Settings
        parts = name.removeprefix("TIERMEM_").lower().split("__")
        for i, part in enumerate(parts):
            assert part in model.model_fields, f"{name}: no setting {part!r}"
            if i < len(parts) - 1:
                model = model.model_fields[part].annotation


# --- .dockerignore and the Dockerfile ---------------------------------------------------


def test_dockerignore_keeps_secrets_and_clutter_out_but_not_the_sources() -> None:
    lines = {
        line.strip()
        for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    }
    for pattern in (".venv", ".tiermem", ".git", ".env", "bench/results", "**/__pycache__"):
        assert pattern in lines, pattern
    for needed in ("pyproject.toml", "README.md", "shared", "services", "workers"):
        assert needed not in lines, needed


def test_dockerfile_runs_as_non_root_with_a_healthcheck() -> None:
    text = (ROOT / DOCKERFILE).read_text(encoding="utf-8")
    assert "python:3.11-slim" in text
    users = re.findall(r"^USER\s+(\S+)", text, flags=re.MULTILINE)
    assert users and users[-1].split(":")[0] not in {"root", "0"}
    assert re.search(r"^HEALTHCHECK .*\n?.*/healthz", text, flags=re.MULTILINE)
    assert "curl" not in text.split("HEALTHCHECK", 1)[1].split("\n\n", 1)[0]
    assert "pip install --no-cache-dir ." in text
    assert re.search(r'^CMD \["tiermem", "api"\]$', text, flags=re.MULTILINE)
