"""docker/: a compose file valid per the Compose Specification, an image whose start command runs
here as it would in the container, and a container config that ctxproxy loads.

No Docker engine runs on these machines, so the Compose Specification's JSON schema stands in for
`docker compose config`. It comes from a pinned PyPI wheel (check-jsonschema vendors it), cached
like the test model in proxy/testing/llamacpp.py; the tests that need it skip when the registry
is out of reach. docker-compose 1.29's bundled schema is older than `depends_on.required` and
would reject a valid file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
import yaml

from proxy.settings import load_settings
from proxy.testing.llamacpp import default_cache_dir
from proxy.testing.servers import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKER = REPO_ROOT / "docker"
COMPOSE = DOCKER / "compose.yaml"
DOCKERFILE = DOCKER / "Dockerfile"
CONFIG = DOCKER / "config.yaml"

SCHEMA_REQ = "check-jsonschema==0.39.0"
SCHEMA_MEMBER = "check_jsonschema/builtin_schemas/vendor/compose-spec.json"
SCHEMA_SHA256 = "d549057ebc2925f39f62799eab0db7b9e2c18b35b6c00595199116da3ed10e64"


# -- the Compose Specification schema ----------------------------------------------------------


def fetch_compose_schema(cache_dir: Path) -> Path:
    """The schema file in cache_dir, taken out of its PyPI wheel if missing."""
    target = cache_dir / f"compose-spec.{SCHEMA_SHA256[:16]}.json"
    if target.is_file():
        return target
    with tempfile.TemporaryDirectory(prefix="ctxproxy-compose-spec-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
        try:
            result = subprocess.run(
                [*cmd, "-d", tmp, SCHEMA_REQ], capture_output=True, text=True, timeout=300
            )
        except subprocess.TimeoutExpired:
            pytest.skip(f"the Compose schema's wheel ({SCHEMA_REQ}): pip download timed out")
        wheels = list(Path(tmp).glob("check_jsonschema-*.whl"))
        if result.returncode != 0 or not wheels:
            pytest.skip(
                f"the Compose schema's wheel ({SCHEMA_REQ}) cannot be downloaded "
                f"(rc={result.returncode}): {result.stderr.strip()[-500:]}"
            )
        with zipfile.ZipFile(wheels[0]) as zf:
            data = zf.read(SCHEMA_MEMBER)
    actual = hashlib.sha256(data).hexdigest()
    assert actual == SCHEMA_SHA256, f"{SCHEMA_REQ}:{SCHEMA_MEMBER} has sha256 {actual}"
    cache_dir.mkdir(parents=True, exist_ok=True)
    partial = cache_dir / f".{target.name}.{os.getpid()}.partial"
    partial.write_bytes(data)
    os.replace(partial, target)
    return target


@pytest.fixture(scope="session")
def compose_validator() -> jsonschema.protocols.Validator:
    schema = json.loads(fetch_compose_schema(default_cache_dir()).read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def schema_errors(validator: jsonschema.protocols.Validator, doc: Any) -> list[str]:
    errors = sorted(validator.iter_errors(doc), key=lambda e: e.json_path)
    return [f"{e.json_path}: {e.message}" for e in errors]


# -- compose helpers ---------------------------------------------------------------------------

_VARIABLE = re.compile(
    r"\$(?:(?P<escaped>\$)|\{(?P<name>[A-Za-z_]\w*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\})"
)


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?err} and $$, in values only."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def substitute(m: re.Match[str]) -> str:
        if m["escaped"]:
            return "$"
        name, op, arg = m["name"], m["op"] or "", m["arg"] or ""
        current = env.get(name)
        unset = current is None or (op.startswith(":") and current == "")
        if op.endswith("?") and unset:
            raise KeyError(f"required variable {name} is missing: {arg}")
        if op.endswith("-") and unset:
            return arg
        return current or ""

    return _VARIABLE.sub(substitute, value)


def dependencies(service: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """depends_on in its long form, whichever form the file uses."""
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        deps = {name: {"condition": "service_started"} for name in deps}
    return {name: {"required": True, **(spec or {})} for name, spec in deps.items()}


def enabled_services(compose: dict[str, Any], profiles: set[str]) -> set[str]:
    return {
        name
        for name, svc in compose["services"].items()
        if not svc.get("profiles") or profiles & set(svc["profiles"])
    }


def command_option(command: list[str], option: str) -> str:
    return command[command.index(option) + 1]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


# -- Dockerfile helpers ------------------------------------------------------------------------


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue  # inside a continuation too, as Docker does
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        instruction, _, args = (pending + line).partition(" ")
        out.append((instruction.upper(), args.strip()))
        pending = ""
    return out


def stages(instructions: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """Each build stage's instructions, FROM first; global ARG defaults substituted into FROM."""
    global_args: dict[str, str] = {}
    result: list[list[tuple[str, str]]] = []
    for instruction, args in instructions:
        if instruction == "ARG" and not result:
            name, _, default = args.partition("=")
            global_args[name] = default.strip('"')
        elif instruction == "FROM":
            args = re.sub(r"\$\{(\w+)\}", lambda m: global_args[m[1]], args)
            result.append([(instruction, args)])
        elif result:
            result[-1].append((instruction, args))
    return result


def env_of(stage: list[tuple[str, str]]) -> dict[str, str]:
    env: dict[str, str] = {}
    for instruction, args in stage:
        if instruction == "ENV":
            env.update(word.split("=", 1) for word in shlex.split(args))  # type: ignore[misc]
    return env


def one(stage: list[tuple[str, str]], instruction: str) -> str:
    found = [args for name, args in stage if name == instruction]
    assert len(found) == 1, f"the runtime stage needs exactly one {instruction}, has {found}"
    return found[0]


@pytest.fixture(scope="module")
def runtime_stage() -> list[tuple[str, str]]:
    return stages(dockerfile_instructions(DOCKERFILE.read_text()))[-1]


def start_command(runtime: list[tuple[str, str]]) -> list[str]:
    cmd = json.loads(one(runtime, "CMD"))
    assert cmd[:2] == ["/bin/sh", "-c"] and len(cmd) == 3, cmd
    return cmd


def healthcheck_command(runtime: list[tuple[str, str]]) -> list[str]:
    match = re.fullmatch(r"((?:--\S+\s+)*)CMD\s+(\[.*\])", one(runtime, "HEALTHCHECK"))
    assert match, "HEALTHCHECK must be exec form: HEALTHCHECK [--options] CMD [...]"
    return json.loads(match[2])


# -- compose.yaml ------------------------------------------------------------------------------


def test_compose_file_is_valid_per_the_compose_specification(
    compose: dict[str, Any], compose_validator: jsonschema.protocols.Validator
) -> None:
    assert schema_errors(compose_validator, compose) == []
    # As Compose sees it after interpolation, with nothing set: every variable has a default.
    assert schema_errors(compose_validator, interpolate(compose, {})) == []


@pytest.mark.parametrize(
    "path, bad",
    [
        (("services", "ctxproxy", "depends_on", "llamacpp"), {"condtion": "service_healthy"}),
        (("services", "postgres", "healthcheck"), {"test": ["CMD", "true"], "intervall": "5s"}),
        (("services", "ctxproxy"), {"build": {"context": ".."}, "restart_policy": "always"}),
    ],
    ids=["depends_on typo", "healthcheck typo", "unknown service key"],
)
def test_the_schema_check_rejects_what_compose_would(
    compose: dict[str, Any],
    compose_validator: jsonschema.protocols.Validator,
    path: tuple[str, ...],
    bad: dict[str, Any],
) -> None:
    doc = json.loads(json.dumps(compose))
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = bad
    assert schema_errors(compose_validator, doc) != []


def test_every_dependency_is_a_service_and_optional_where_a_profile_can_disable_it(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    for name, svc in services.items():
        for dep, spec in dependencies(svc).items():
            assert dep in services, f"{name} depends on undefined service {dep}"
            dep_profiles = set(services[dep].get("profiles") or [])
            own_profiles = set(svc.get("profiles") or [])
            can_be_off = bool(dep_profiles) and not (own_profiles and own_profiles <= dep_profiles)
            if can_be_off:
                assert spec["required"] is False, f"{name} -> {dep}: needs `required: false`"
            if spec["condition"] == "service_healthy":
                check = services[dep].get("healthcheck") or {}
                assert check.get("test") and not check.get("disable"), f"{dep}: no healthcheck"


@pytest.mark.parametrize(
    "profiles",
    [{"llamacpp"}, {"ollama"}, {"vllm"}, {"llamacpp", "postgres"}, {"ollama", "postgres"}],
    ids=lambda p: "+".join(sorted(p)),
)
def test_each_profile_starts_ctxproxy_beside_its_server(
    compose: dict[str, Any], profiles: set[str]
) -> None:
    enabled = enabled_services(compose, profiles)
    assert enabled == {"ctxproxy", *profiles}
    waits_for = set(dependencies(compose["services"]["ctxproxy"]))
    assert enabled - {"ctxproxy"} <= waits_for, "ctxproxy must wait for the servers it uses"


def test_model_servers_and_postgres_have_what_they_need(compose: dict[str, Any]) -> None:
    services = compose["services"]
    llama = services["llamacpp"]
    assert llama["image"].startswith("ghcr.io/ggml-org/llama.cpp:server")
    assert any(v.endswith(":/models:ro") for v in llama["volumes"])
    command = interpolate(llama["command"], {"MODEL_FILE": "m.gguf"})
    assert command_option(command, "--host") == "0.0.0.0"
    assert command_option(command, "-m") == "/models/m.gguf"
    assert "/health" in " ".join(llama["healthcheck"]["test"])

    assert services["ollama"]["image"].startswith("ollama/ollama")
    assert services["ollama"]["healthcheck"]["test"]

    vllm = services["vllm"]
    assert vllm["image"].startswith("vllm/vllm-openai")
    devices = vllm["deploy"]["resources"]["reservations"]["devices"]
    assert any("gpu" in d["capabilities"] for d in devices)

    postgres = services["postgres"]
    assert postgres["image"] == "postgres:15"
    assert "pg_isready" in " ".join(postgres["healthcheck"]["test"])


def test_default_models_directory_is_the_repository_models_folder(
    compose: dict[str, Any],
) -> None:
    volume = interpolate(compose["services"]["llamacpp"]["volumes"][0], {})
    host_path = volume.split(":")[0]
    assert (COMPOSE.parent / host_path).resolve() == REPO_ROOT / "models"


def test_ctxproxy_builds_this_repository_and_mounts_the_config_the_image_reads(
    compose: dict[str, Any], runtime_stage: list[tuple[str, str]]
) -> None:
    svc = compose["services"]["ctxproxy"]
    context = (COMPOSE.parent / svc["build"]["context"]).resolve()
    assert context == REPO_ROOT
    assert (context / svc["build"]["dockerfile"]).resolve() == DOCKERFILE

    config_in_image = env_of(runtime_stage)["CTXPROXY_CONFIG"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in svc["volumes"]}
    assert (COMPOSE.parent / mounts[config_in_image]).resolve() == CONFIG
    assert "/data" in mounts, "the database volume"
    container_port = interpolate(svc["ports"][0], {}).rsplit(":", 1)[1]
    assert container_port == one(runtime_stage, "EXPOSE") == "8080"
    # Compose's 10 s default would kill streams that ctxproxy lets finish for up to 30 s.
    assert int(svc["stop_grace_period"].rstrip("s")) > 30


# -- docker/config.yaml ------------------------------------------------------------------------


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("CTXPROXY_"):
            monkeypatch.delenv(name)


def test_container_config_loads_and_points_at_the_compose_services(
    clean_env: None, compose: dict[str, Any]
) -> None:
    settings = load_settings(CONFIG)
    assert (settings.listen.host, settings.listen.port) == ("0.0.0.0", 8080)
    assert settings.database_url == "sqlite:////data/ctxproxy.db"
    [upstream] = settings.upstreams
    assert (upstream.kind, upstream.base_url) == ("llamacpp", "http://llamacpp:8080/v1")
    llama_port = command_option(compose["services"]["llamacpp"]["command"], "--port")
    assert httpx.URL(upstream.base_url).port == int(llama_port)


def test_container_config_yields_to_the_environment_compose_passes(
    clean_env: None, compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    passed = compose["services"]["ctxproxy"]["environment"]
    assert {"CTXPROXY_UPSTREAMS", "CTXPROXY_DATABASE_URL"} <= set(passed)
    url = "postgresql+psycopg://ctxproxy:ctxproxy@postgres:5432/ctxproxy"
    monkeypatch.setenv("CTXPROXY_DATABASE_URL", url)
    monkeypatch.setenv(
        "CTXPROXY_UPSTREAMS",
        '[{"name": "local", "kind": "ollama", "base_url": "http://ollama:11434/v1"}]',
    )
    settings = load_settings(CONFIG)
    assert settings.database_url == url
    assert [(u.kind, u.base_url) for u in settings.upstreams] == [
        ("ollama", "http://ollama:11434/v1")
    ]


# -- Dockerfile --------------------------------------------------------------------------------


def test_image_is_multi_stage_slim_and_not_root() -> None:
    all_stages = stages(dockerfile_instructions(DOCKERFILE.read_text()))
    assert len(all_stages) >= 2
    runtime = all_stages[-1]
    assert runtime[0][1].split()[0] == "python:3.11-slim"
    builder_runs = " ".join(a for stage in all_stages[:-1] for i, a in stage if i == "RUN")
    assert "pip wheel" in builder_runs
    runtime_runs = " ".join(a for i, a in runtime if i == "RUN")
    assert "from=builder" in runtime_runs and "--no-index" in runtime_runs
    user = one(runtime, "USER").split(":")[0]
    assert user not in ("root", "0")


def test_image_copies_every_package_the_wheel_is_built_from() -> None:
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    packages = {
        p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    }
    copied: set[str] = set()
    for instruction, args in dockerfile_instructions(DOCKERFILE.read_text()):
        if instruction == "COPY" and "--from" not in args:
            sources = [w for w in shlex.split(args) if not w.startswith("--")][:-1]
            for source in sources:
                assert (REPO_ROOT / source).exists(), f"COPY {source}: not in the repository"
                copied.add(source)
    assert packages <= copied
    assert {"pyproject.toml", pyproject["project"]["readme"]} <= copied


def test_start_command_migrates_then_serves(runtime_stage: list[tuple[str, str]]) -> None:
    script = start_command(runtime_stage)[2]
    steps = [shlex.split(step) for step in script.split("&&")]
    assert steps == [
        ["ctxproxy", "migrate"],
        ["exec", "ctxproxy", "serve", "--host", "0.0.0.0"],
    ]


def test_healthcheck_asks_readyz(runtime_stage: list[tuple[str, str]]) -> None:
    command = healthcheck_command(runtime_stage)
    assert command[0] == "python" and "/readyz" in command[-1]


# -- the image's commands, run here ------------------------------------------------------------


@pytest.fixture
def container(tmp_path: Path, runtime_stage: list[tuple[str, str]]) -> Iterator[Any]:
    """Run the image's CMD as the container would: its env, docker/config.yaml, a /data dir."""
    started: list[subprocess.Popen[bytes]] = []

    def run(upstream_url: str) -> tuple[subprocess.Popen[bytes], dict[str, str], Path]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CTXPROXY_")}
        env.update(env_of(runtime_stage))
        env.update(
            CTXPROXY_CONFIG=str(CONFIG),  # the file compose mounts at the image's config path
            CTXPROXY_DATABASE_URL=f"sqlite:///{tmp_path / 'ctxproxy.db'}",
            CTXPROXY_UPSTREAMS=json.dumps(
                [{"name": "local", "kind": "openai", "base_url": upstream_url}]
            ),
            CTXPROXY_LISTEN__PORT=str(free_port()),
            PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        )
        log = tmp_path / "container.log"
        proc = subprocess.Popen(
            start_command(runtime_stage),
            cwd=tmp_path,
            env=env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so cleanup reaches any orphan
        )
        started.append(proc)
        url = f"http://127.0.0.1:{env['CTXPROXY_LISTEN__PORT']}/healthz"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(url, timeout=1).status_code == 200:
                    return proc, env, log
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("the start command did not serve:\n" + log.read_text()[-3000:])
            time.sleep(0.1)

    yield run
    for proc in started:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def run_healthcheck(runtime: list[tuple[str, str]], env: dict[str, str]) -> int:
    command = healthcheck_command(runtime)
    command[0] = sys.executable  # the image's `python`
    return subprocess.run(command, env=env, capture_output=True, timeout=30).returncode


def test_start_command_migrates_serves_and_stops_on_sigterm(
    container: Any, upstream_url: str, runtime_stage: list[tuple[str, str]], tmp_path: Path
) -> None:
    proc, env, log = container(upstream_url)
    assert (tmp_path / "ctxproxy.db").is_file()
    assert run_healthcheck(runtime_stage, env) == 0
    # `exec`: SIGTERM reaches ctxproxy itself, not a shell that would die and leave it serving.
    # uvicorn re-raises the signal once shut down, hence -SIGTERM here; as a container's PID 1
    # that re-raise is ignored and the exit status is 0.
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=40) in (0, -signal.SIGTERM), log.read_text()[-3000:]
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{env['CTXPROXY_LISTEN__PORT']}/healthz", timeout=2)


def test_healthcheck_fails_while_no_upstream_answers(
    container: Any, runtime_stage: list[tuple[str, str]]
) -> None:
    _, env, _ = container(f"http://127.0.0.1:{free_port()}/v1")
    assert run_healthcheck(runtime_stage, env) != 0
