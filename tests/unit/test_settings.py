"""Configuration: the shipped file runs as is, env vars override, bad keys are named."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.settings import ConfigError, load_settings

ROOT = Path(__file__).resolve().parents[2]


def test_shipped_config_loads_with_public_names() -> None:
    s = load_settings(ROOT / "config.yaml")
    assert (s.listen.host, s.listen.port) == ("127.0.0.1", 8080)
    assert s.database_url == "sqlite:///./ctxproxy.db"
    assert s.api_keys == [] and s.admin_key is None
    local = s.upstreams[0]
    assert (local.name, local.kind, local.models, local.context_window) == (
        "local",
        "llamacpp",
        ["*"],
        None,
    )
    assert s.compaction.pipeline == ["traceback", "tiered", "forget"]
    assert (s.compaction.trigger, s.compaction.target) == (1.0, 0.5)


def test_embedded_defaults_match_shipped_file(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CTXPROXY_CONFIG", raising=False)
    assert load_settings() == load_settings(ROOT / "config.yaml")


def test_env_overrides_file(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("CTXPROXY_LISTEN__PORT", "9999")
    monkeypatch.setenv("CTXPROXY_API_KEYS", '["sk-a", "sk-b"]')
    monkeypatch.setenv("CTXPROXY_COMPACTION__TARGET", "0.4")
    s = load_settings(ROOT / "config.yaml")
    assert s.listen.port == 9999 and s.api_keys == ["sk-a", "sk-b"]
    assert s.compaction.target == 0.4


def test_config_env_var_selects_file(tmp_path: Path, monkeypatch) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("listen: {port: 7000}\n")
    monkeypatch.setenv("CTXPROXY_CONFIG", str(cfg))
    assert load_settings().listen.port == 7000


@pytest.mark.parametrize(
    "text, key",
    [
        ("listen: {prot: 1}\n", "listen.prot"),
        ("upstreams: [{name: a, base_url: 'ftp://x'}]\n", "upstreams.0.base_url"),
        ("upstreams: [{name: a, kind: tgi, base_url: 'http://x'}]\n", "upstreams.0.kind"),
        ("compaction: {target: 3}\n", "compaction.target"),
        ("compaction: {tiered: {keep_recnt: 2}}\n", "compaction.tiered.keep_recnt"),
    ],
)
def test_bad_config_names_the_key(tmp_path: Path, text: str, key: str) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_settings(cfg)
    assert key in str(info.value)


def test_missing_and_unparsable_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_settings(tmp_path / "nope.yaml")
    (tmp_path / "x.yaml").write_text("listen: [\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_settings(tmp_path / "x.yaml")


def test_unknown_strategy_fails_at_load(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("compaction: {pipeline: [traceback, magic]}\n")
    with pytest.raises(ConfigError, match=r"compaction.pipeline.*magic"):
        load_settings(cfg)
