"""Operating the installed package: folders, settings, flags, honest commands, the HTTP
guard and the plan's bounds (logic only: the commands that need Kafka or Redis are in
tests/integration/test_operate_live.py)."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest

import streams
from streams.cli import build_parser, main
from streams.settings import Settings, SettingsError, load_settings, settings_table

REPO = Path(__file__).resolve().parents[2]
PACKAGE_DIR = Path(streams.__file__).resolve().parent.parent


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No RECRAWL_* from outside; per-user folders under ``tmp_path``."""
    import os

    for k in list(os.environ):
        if k.startswith("RECRAWL_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    return tmp_path


# -- folders (the installed copy writes nothing next to itself) -----------------------------
def test_home_cache_and_data_default_to_per_user_folders(clean_env: Path,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    data = Settings().data_dir  # <home>/worker (the home and cache: the infra help below)
    assert data == clean_env / "state" / "recrawl" / "worker" and data.is_absolute()
    assert not data.is_relative_to(PACKAGE_DIR), data
    monkeypatch.chdir(clean_env)  # the same from any current folder
    assert Settings().data_dir == data
    monkeypatch.setenv("RECRAWL_HOME", str(clean_env / "h"))
    assert Settings().data_dir == clean_env / "h" / "worker"
    monkeypatch.setenv("RECRAWL_DATA_DIR", "rel")
    assert Settings().data_dir == Path("rel")


def test_infra_help_names_the_per_user_home(clean_env: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["infra", "--help"])
    out = "".join(capsys.readouterr().out.split())  # (help wraps long paths at hyphens)
    assert "./var" not in out
    assert f"statefolder:{clean_env / 'state' / 'recrawl'}" in out  # the home
    assert f"$RECRAWL_CACHEor{clean_env / 'cache' / 'recrawl'}" in out


# -- version and flags ------------------------------------------------------------------------
def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"recrawl {version('recrawl')}"


def test_worker_help_lists_the_settings_with_env_names_and_defaults(
        clean_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["worker", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for flag, env, default in (
            ("--kafka-bootstrap", "RECRAWL_KAFKA_BOOTSTRAP", "127.0.0.1:9092"),
            ("--redis-url", "RECRAWL_REDIS_URL", "redis://127.0.0.1:6379/0"),
            ("--budget-per-s", "RECRAWL_BUDGET_PER_S", "10"),
            ("--web-port", "RECRAWL_WEB_PORT", "6066"),
            ("--connect-timeout-s", "RECRAWL_CONNECT_TIMEOUT_S", "10")):
        assert flag in out and f"{env}; default {default}]" in out, flag
    assert "``" not in out and ":class:" not in out  # plain text, no reST markup
    for name in Settings.model_fields:  # every setting in use has its flag
        if name not in ("ping_dedup_window_s", "ping_dedup_max_per_host"):
            assert f"--{name.replace('_', '-')}" in out, name


def test_a_flag_wins_over_env_which_wins_over_the_config_file(
        clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from streams.commands._settings import settings_from_args

    cfg = clean_env / "recrawl.toml"
    cfg.write_text('budget_per_s = 3.0\nkafka_bootstrap = "127.0.0.1:1111"\ntick_s = 0.2\n')
    monkeypatch.setenv("RECRAWL_CONFIG", str(cfg))
    monkeypatch.setenv("RECRAWL_BUDGET_PER_S", "4")
    args = build_parser().parse_args(["worker", "--kafka-bootstrap", "127.0.0.1:2222",
                                      "--web-port", "7000", "--no-gc-freeze"])
    s = settings_from_args(args)
    assert (s.kafka_bootstrap, s.budget_per_s, s.tick_s, s.web_port, s.gc_freeze) == (
        "127.0.0.1:2222", 4.0, 0.2, 7000, False)


# -- the config file and the environment --------------------------------------------------------
def test_a_missing_config_file_is_an_error(clean_env: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECRAWL_CONFIG", str(clean_env / "nope.toml"))
    with pytest.raises(SettingsError, match=r"nope\.toml \(RECRAWL_CONFIG\) does not exist"):
        load_settings()


def test_a_yaml_config_file_is_refused_not_ignored(clean_env: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = clean_env / "recrawl.yaml"
    cfg.write_text("budget_per_s: 20\nredis_url: redis://127.0.0.1:1/0\n")
    monkeypatch.setenv("RECRAWL_CONFIG", str(cfg))
    with pytest.raises(SettingsError, match="is not TOML"):
        load_settings()


def test_an_unknown_config_key_is_an_error_naming_it(clean_env: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = clean_env / "recrawl.toml"
    cfg.write_text("budget_per_s = 20\nbudget_pr_s = 30\n")
    monkeypatch.setenv("RECRAWL_CONFIG", str(cfg))
    with pytest.raises(SettingsError, match="unknown setting budget_pr_s"):
        load_settings()


def test_an_unknown_recrawl_env_name_is_reported(clean_env: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("RECRAWL_BUDGET", "20")  # (the setting is RECRAWL_BUDGET_PER_S)
    monkeypatch.setenv("RECRAWL_HOME", str(clean_env / "h"))  # not a setting, but known
    with caplog.at_level(logging.WARNING, logger="streams.settings"):
        load_settings()
    assert "RECRAWL_BUDGET is no recrawl setting" in caplog.text
    assert "RECRAWL_HOME" not in caplog.text


def test_a_bad_value_is_one_line_naming_the_setting(
        clean_env: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("RECRAWL_WEB_PORT", "http")
    with pytest.raises(SettingsError) as err:
        load_settings()
    assert "\n" not in str(err.value) and "RECRAWL_WEB_PORT='http'" in str(err.value)
    # through the command line: one line on stderr, status 2, no traceback
    assert main(["budget", "show"]) == 2
    got = capsys.readouterr()
    assert got.err.count("\n") == 1 and "RECRAWL_WEB_PORT='http'" in got.err
    monkeypatch.delenv("RECRAWL_WEB_PORT")
    assert main(["ping", "https://a.org/", "--connect-timeout-s", "-1"]) == 2
    got = capsys.readouterr()
    assert got.err.count("\n") == 1 and "--connect-timeout-s='-1'" in got.err


def test_the_docs_settings_table_is_the_models() -> None:
    doc = (REPO / "docs" / "operating.md").read_text()
    assert settings_table() in doc, (
        "docs/operating.md's settings table differs from the model: paste "
        "`python -c 'from streams.settings import settings_table; print(settings_table())'`")


# -- honest commands: refused as the worker would refuse them, nothing sent ---------------------
def _worker_reason(model: type, value: bytes) -> str:
    """The reason the worker's own check (Agents._validate) gives for ``value``."""
    import time

    from pydantic import ValidationError

    from streams.events.records import validation_reason

    try:
        model.model_validate_json(value, context={"now_s": time.time(),  # type: ignore[attr-defined]
                                                  "max_future_s": 300.0})
    except ValidationError as exc:
        return validation_reason(exc)
    raise AssertionError("the worker accepts it")


@pytest.mark.parametrize("value,body", [
    ("1e12", b'{"budget_per_s": 1000000000000.0}'),
    ("inf", b'{"budget_per_s": Infinity}'),
])
def test_budget_refuses_what_the_worker_rejects(clean_env: Path, value: str, body: bytes,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from streams.events.records import ControlEvent

    # a closed port: had it tried to send, the answer would be "cannot reach Kafka" (3)
    assert main(["budget", "set", value, "--kafka-bootstrap", "127.0.0.1:9"]) == 2
    err = capsys.readouterr().err
    assert "not sent" in err and _worker_reason(ControlEvent, body) in err


def test_ping_refuses_a_change_time_in_the_future(clean_env: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ping", "https://a.org/x", "--changed-at", "2999-01-01",
                 "--kafka-bootstrap", "127.0.0.1:9"]) == 2
    err = capsys.readouterr().err
    assert "not sent, the worker would reject it: changed_at" in err
    assert "in the future" in err


def test_explain_of_a_url_without_scheme_says_so(clean_env: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "example.com/a", "--redis-url", "redis://127.0.0.1:9/0"]) == 2
    err = capsys.readouterr().err
    assert "scheme must be http or https" in err and "https://example.com/a" in err
    assert "no live worker" not in err


# -- the HTTP guard ------------------------------------------------------------------------------
@pytest.mark.parametrize("host,ok", [
    ("127.0.0.1:6066", True), ("localhost:6066", True), ("LOCALHOST", True),
    ("[::1]:6066", True), ("127.3.4.5", True), (None, True),
    ("evil.example:6066", False), ("127.0.0.1.evil.example", False), ("10.0.0.1", False),
    ("crawler.internal:80", True),
])
def test_host_header_check(host: str | None, ok: bool) -> None:
    from streams.worker.web import host_allowed

    assert host_allowed(host, frozenset({"crawler.internal"})) is ok


def test_dashboard_csp_allows_exactly_its_inline_script_and_style() -> None:
    import base64
    import hashlib
    import re

    from streams.worker.web import dashboard_csp, dashboard_html

    csp = dashboard_csp()
    html = dashboard_html().decode()
    script = re.search(r"<script>(.*?)</script>", html, re.S)
    assert script is not None
    digest = base64.b64encode(hashlib.sha256(script.group(1).encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in csp
    assert "frame-ancestors 'none'" in csp and "default-src 'none'" in csp
    assert "unsafe-inline'" not in csp.split("style-src-attr")[0]


# -- /plan: one computation at a time, cached ----------------------------------------------------
def test_single_flight_computes_once_and_refuses_a_second_key_while_busy() -> None:
    from streams.worker.plan import SingleFlight

    now = [0.0]
    flight = SingleFlight(ttl_s=30.0, clock=lambda: now[0])
    release = asyncio.Event()

    async def compute() -> dict[str, int]:
        await release.wait()
        return {"n": flight.computations}

    async def scenario() -> list[object]:
        a = asyncio.create_task(flight.get((1.0,), compute))
        b = asyncio.create_task(flight.get((1.0,), compute))  # the same: shares a's answer
        await asyncio.sleep(0)
        other = await flight.get((2.0,), compute)  # busy: refused at once
        release.set()
        got = [await a, await b, other]
        got.append(await flight.get((1.0,), compute))  # cached
        now[0] = 31.0
        got.append(await flight.get((1.0,), compute))  # expired: computed again
        return got

    a, b, other, cached, again = asyncio.run(scenario())
    assert a == b == cached == {"n": 1} and other is None and again == {"n": 2}
    assert flight.computations == 2


# -- outages reported, not once per retry ------------------------------------------------------
def test_outage_report_logs_once_per_interval_with_the_address(
        caplog: pytest.LogCaptureFixture) -> None:
    from streams.reach import OutageReport, redis_address

    now = [0.0]
    url = redis_address("redis://:secret@127.0.0.1:6390/0")
    assert "secret" not in url
    rep = OutageReport("redis", url, 10.0, logging.getLogger("t.outage"), clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="t.outage"):
        for i in range(100):  # 100 retries over 25 s
            now[0] = i * 0.25
            rep.failed(ConnectionError("refused"))
        rep.ok()
    lines = caplog.text.strip().splitlines()
    assert len(lines) == 4  # at 0, 10, 20 s, then "reachable again"
    assert all("redis at redis://:***@127.0.0.1:6390/0" in x for x in lines)
    assert "reachable again" in lines[-1]


def test_settings_table_lists_every_setting() -> None:
    table = settings_table()
    for name in Settings.model_fields:
        assert f"| `{name}` | `RECRAWL_{name.upper()}` |" in table
    json.dumps(table)  # plain text

