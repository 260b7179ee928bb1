"""The session viewer under /ui: in a real headless Chromium, and as plain HTTP for the rules."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from proxy.api import ui
from proxy.app import create_app
from proxy.settings import Settings
from proxy.store import Store
from proxy.testing.records import new_request
from proxy.testing.servers import ServerThread
from proxy.ui.compare import align, diff
from strategies.messages import message_hash
from tests.conftest import BROWSER_MISSING
from tests.e2e.test_sessions_audit import noisy_log

LOCAL = "http://localhost"  # the Host a local client sends; TestClient's own is refused

LOOPBACK = ("127.0.0.1", 50000)
ADMIN = "admin-secret"


def agent_loop(post: Callable[..., httpx.Response], session: str, turns: int) -> list[dict]:
    """An agent calling tools whose outputs are long logs: with a small window, compaction fires."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You fix bugs."},
        {"role": "user", "content": "Make the test suite pass."},
    ]
    for turn in range(turns):
        r = post(
            "/v1/chat/completions",
            headers={"X-Session-Id": session},
            json={"model": "tools", "messages": messages},
        )
        assert r.status_code == 200, r.text
        answer = r.json()["choices"][0]["message"]
        messages.append(answer)
        for call in answer["tool_calls"]:
            messages.append(
                {"role": "tool", "tool_call_id": call["id"], "content": noisy_log(turn)}
            )
    return messages


def small_window(settings_for: Callable[..., Settings], upstream_url: str, **more: Any) -> Settings:
    # 8,000 tokens, less the 133 the budget keeps for the recall tool's definition.
    return settings_for(
        upstreams=[{"name": "scripted", "base_url": upstream_url, "context_window": 8133}], **more
    )


# --- in a real browser ------------------------------------------------------------------------


def _browser_paths() -> tuple[str, str] | None:
    """Debian's chromium and chromedriver, from PATH or where the packages put them."""

    def find(*names: str) -> str | None:
        return next((p for p in map(shutil.which, names) if p), None)

    browser = find("chromium", "chromium-browser", "/usr/bin/chromium")
    driver = find("chromedriver", "/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver")
    return (browser, driver) if browser and driver else None


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    paths = _browser_paths()
    if paths is None:
        pytest.skip(f"{BROWSER_MISSING}: install Debian's `chromium chromium-driver`")
    webdriver = pytest.importorskip(
        "selenium.webdriver", reason="selenium is not installed (pip install '.[test]')"
    )
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = paths[0]
    for arg in (
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--headless=new",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        "--window-size=1280,900",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(paths[1]), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def artifacts(tmp_path: Path) -> Path:
    where = Path(os.environ.get("CTXPROXY_TEST_ARTIFACTS") or tmp_path / "artifacts") / "ui"
    where.mkdir(parents=True, exist_ok=True)
    return where


def screenshot(driver: Any, folder: Path, name: str, width: int = 1280) -> Path:
    """The whole page: the window is stretched to the document's height first."""
    driver.set_window_size(width, 900)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(width, min(int(height) + 140, 6000))
    path = folder / f"{name}.png"
    driver.save_screenshot(str(path))
    print(f"screenshot: {path}")
    return path


def test_browser_walks_from_sessions_to_an_original(
    browser: Any, artifacts: Path, start_proxy, settings_for, upstream_url: str, script
) -> None:
    from selenium.webdriver.common.by import By

    proxy: ServerThread = start_proxy(small_window(settings_for, upstream_url))
    with httpx.Client(base_url=proxy.url, timeout=30) as http:
        sent = agent_loop(http.post, "ui-agent", turns=6)
        exchanges = http.get("/sessions/ui-agent/exchanges").json()["data"]
    fired = next(x for x in exchanges if x["phases"])

    # The sessions list: the session named by its first message, its turns, a link to it.
    browser.get(proxy.url + "/ui/")
    row = browser.find_element(By.CSS_SELECTOR, "tr[data-session='ui-agent']")
    assert "tools" in row.text and row.find_element(By.CSS_SELECTOR, ".turns").text == "6"
    assert row.find_element(By.CSS_SELECTOR, ".bar .comp").size["width"] > 0
    screenshot(browser, artifacts, "1-sessions")
    row.find_element(By.LINK_TEXT, "Make the test suite pass.").click()

    # The session page: a chart with a marker where compaction first fired, at that turn.
    chart = browser.find_element(By.CSS_SELECTOR, "svg#chart")
    assert chart.is_displayed() and chart.size["width"] > 600
    markers = chart.find_elements(By.CSS_SELECTOR, ".marker")
    first = markers[0]
    assert int(first.get_attribute("data-turn")) == fired["seq"]
    assert first.get_attribute("data-phases") == ",".join(fired["phases"])
    assert fired["phases"][0] in first.text  # the phase is labelled on the chart
    circle = first.find_element(By.TAG_NAME, "circle")
    label = next(
        t for t in chart.find_elements(By.CSS_SELECTOR, "text.xlab") if t.text == str(fired["seq"])
    )
    centre = lambda e: e.rect["x"] + e.rect["width"] / 2  # noqa: E731
    assert abs(centre(circle) - centre(label)) < 3, "the marker sits above its turn's label"
    lines = {p.get_attribute("data-series") for p in chart.find_elements(By.TAG_NAME, "polyline")}
    # and the prompt cache: what ctxproxy expected cached, the net saving (this upstream
    # reports no cached tokens, so no "cached" line)
    assert lines == {"original", "compiled", "budget", "window", "expected", "net saved"}
    turns = browser.find_elements(By.CSS_SELECTOR, "table.turns tbody tr")
    assert len(turns) == 6
    screenshot(browser, artifacts, "2-session")

    # The exchange page of the last turn: old tool outputs folded, each linking its original.
    browser.find_element(By.CSS_SELECTOR, "#turn-6 a").click()
    assert "Request 6 · turn 6" in browser.find_element(By.TAG_NAME, "h1").text
    # (older steps were forgotten behind the marker; the newest outputs are kept whole)
    compacted = browser.find_elements(
        By.CSS_SELECTOR, ".msg-row[data-status='folded'], .msg-row[data-status='rewritten']"
    )
    assert compacted, "turn 6 of an 8k window must show compacted tool outputs"
    row = compacted[0]  # the task, hosting the forget marker in the user's voice
    compiled_cell = row.find_element(By.CSS_SELECTOR, ".cell.compiled")
    assert "earlier messages" in compiled_cell.text and "Make the test suite pass." in row.text
    position = int(row.get_attribute("id").removeprefix("m"))
    tag = compiled_cell.find_element(By.CSS_SELECTOR, ".tag").text
    assert row.get_attribute("data-status") in tag
    statuses = {
        r.get_attribute("data-status") for r in browser.find_elements(By.CSS_SELECTOR, ".msg-row")
    }
    assert {"kept", "dropped"} <= statuses
    link = row.find_element(By.CSS_SELECTOR, "a.orig-link")
    href = link.get_attribute("href")
    assert href.endswith("/messages/" + message_hash(sent[position]))
    row.find_element(By.CSS_SELECTOR, "details.diff summary").click()  # opens without scripts
    assert row.find_element(By.CSS_SELECTOR, "details.diff .add").is_displayed()  # the marker
    assert browser.find_elements(By.CSS_SELECTOR, "table.events tbody tr")
    screenshot(browser, artifacts, "3-exchange")

    # Narrow window: the two columns stack and nothing scrolls sideways.
    screenshot(browser, artifacts, "4-exchange-narrow", width=420)
    overflow = browser.execute_script(
        "return document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert overflow <= 1

    # Following the link gives the original message as JSON.
    link = browser.find_element(By.CSS_SELECTOR, f"#m{position} a.orig-link")
    browser.set_window_size(1280, 900)
    link.click()
    original = json.loads(browser.find_element(By.TAG_NAME, "pre").text)
    assert original["message"] == sent[position]
    assert original["message"]["content"] == "Make the test suite pass."  # as the user wrote it
    screenshot(browser, artifacts, "5-original-json")


# --- plain HTTP: content, paging, the admin rule ------------------------------------------------


@pytest.fixture
def filled(settings_for, upstream_url: str, script) -> Iterator[tuple[TestClient, list[dict]]]:
    app = create_app(small_window(settings_for, upstream_url, admin_key=ADMIN))
    with TestClient(app, headers={"Authorization": f"Bearer {ADMIN}"}, base_url=LOCAL) as client:
        yield client, agent_loop(client.post, "agent-7", turns=4)


def test_pages_render_without_scripts_or_external_assets(filled) -> None:
    client, sent = filled
    pages = {
        "/ui/": "agent-7",
        "/ui/sessions/agent-7": 'class="marker"',
        "/ui/sessions/agent-7/exchanges/4": 'data-status="folded"',
    }
    for path, expected in pages.items():
        r = client.get(path)
        assert r.status_code == 200, (path, r.text[:500])
        assert r.headers["content-type"].startswith("text/html")
        assert expected in r.text
        assert "<script" not in r.text.lower()
        refs = re.findall(r'(?:href|src)="([^"]*)"', r.text)
        assert refs and all(u.startswith(("/", "?", "#")) for u in refs), refs
    css = client.get("/ui/ui.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    assert "@media" in css.text and "url(" not in css.text


def test_exchange_page_marks_each_message_and_links_originals(filled) -> None:
    client, sent = filled
    page = client.get("/ui/sessions/agent-7/exchanges/4").text
    detail = client.get("/sessions/agent-7/exchanges/4").json()
    originals = detail["request"]["messages"]
    for i, msg in enumerate(originals):
        assert f'href="/messages/{message_hash(msg)}"' in page
        assert f'id="m{i}"' in page
    assert page.count('class="msg-row ') == len(originals)
    assert "[Output of tool &#39;get_weather&#39; folded" in page  # escaped, not raw HTML
    assert "diff:" in page and 'class="del"' in page
    assert f"{detail['exchange']['tokens_compiled']:,}" in page
    changed = client.get("/ui/sessions/agent-7/exchanges/4?show=changed").text
    assert 'data-status="kept"' not in changed and 'data-status="folded"' in changed


def test_session_page_pages_its_turns(filled, monkeypatch: pytest.MonkeyPatch) -> None:
    client, _ = filled
    monkeypatch.setattr(ui, "TURNS_PER_PAGE", 3)
    second = client.get("/ui/sessions/agent-7?page=2").text
    assert re.findall(r'<tr id="turn-(\d+)"', second) == ["4"]
    assert "page 2 of 2" in second and 'href="?scale=auto&amp;page=1"' in second
    first = client.get("/ui/sessions/agent-7").text
    assert re.findall(r'<tr id="turn-(\d+)"', first) == ["1", "2", "3"]
    assert client.get("/ui/sessions/agent-7?page=99").status_code == 200  # the last page
    assert client.get("/ui/sessions/nobody").status_code == 404
    assert client.get("/ui/sessions/agent-7/exchanges/99").status_code == 404


def test_admin_key_as_bearer_or_basic_password(filled) -> None:
    client, _ = filled
    for path in ("/ui/", "/ui/sessions/agent-7", "/ui/sessions/agent-7/exchanges/1", "/ui/ui.css"):
        r = client.get(path, headers={"Authorization": ""})
        assert r.status_code == 401
        assert r.headers["www-authenticate"].startswith("Basic")  # the browser asks for it
    basic = "Basic " + base64.b64encode(f"admin:{ADMIN}".encode()).decode()
    assert client.get("/ui/", headers={"Authorization": basic}).status_code == 200
    wrong = "Basic " + base64.b64encode(b"admin:nope").decode()
    assert client.get("/ui/", headers={"Authorization": wrong}).status_code == 401
    assert client.get("/ui/", headers={"Authorization": "Bearer nope"}).status_code == 401


def test_without_admin_key_loopback_only(settings_for) -> None:
    app = create_app(settings_for())
    with TestClient(app, client=("203.0.113.9", 40000), base_url=LOCAL) as remote:
        assert remote.get("/ui/").status_code == 403
    with TestClient(app, client=LOOPBACK, base_url=LOCAL) as local:
        r = local.get("/ui/")
        assert r.status_code == 200 and "No sessions yet" in r.text
    assert "/ui/" not in json.dumps(app.openapi())


# --- the comparison behind the exchange page ---------------------------------------------------


def test_align_tells_kept_folded_truncated_elided_dropped_added() -> None:
    system = {"role": "system", "content": "s"}
    log = {"role": "tool", "tool_call_id": "a", "content": "x\n" * 500}
    other = {"role": "tool", "tool_call_id": "b", "content": "y\n" * 500}
    note = {"role": "user", "content": "old note"}
    last = {"role": "user", "content": "now"}
    ref = f"original: /messages/{message_hash(other)[:16]}"
    compiled = [
        system,
        {**log, "content": "x\n[Truncated — 900 chars removed; original: /messages/0]"},
        {**other, "content": f"[Output of tool 'run' folded: 1,000 chars; {ref}]"},
        {"role": "user", "content": "a summary"},
        last,
    ]
    rows = align([system, log, other, note, last], compiled)
    assert [(r.original, r.compiled, r.status) for r in rows] == [
        (0, 0, "kept"),
        (1, 1, "truncated"),
        (2, 2, "folded"),
        (3, 3, "rewritten"),
        (4, 4, "kept"),
    ]
    window = align([system, log, other, note, last], [system, last])
    assert [r.status for r in window] == ["kept", "dropped", "dropped", "dropped", "kept"]
    elided = {**log, "content": "[Output of tool 'run' elided: kept 2 of 500 lines]\nx"}
    assert [r.status for r in align([log], [elided])] == ["elided"]
    assert [r.status for r in align([], [system])] == ["added"]
    # A window dropped the middle and a marker without a hash follows: placed by the kept tail.
    short = {**note, "content": "old…"}
    rows = align([system, log, other, note, last], [system, short, last])
    assert [(r.original, r.compiled, r.status) for r in rows] == [
        (0, 0, "kept"),
        (1, None, "dropped"),
        (2, None, "dropped"),
        (3, 1, "rewritten"),
        (4, 2, "kept"),
    ]


def test_diff_of_a_huge_output_keeps_head_and_tail() -> None:
    d = diff("\n".join(f"line {i}" for i in range(1000)), "[folded]")
    assert (d.added, d.removed) == (1, 1000)
    assert any(kind == "cut" for kind, _ in d.lines) and d.lines[-1] == ("add", "+[folded]")


# --- what a newcomer reads wrong: long sessions, refusals, retries, dead links -----------------


def seed_session(url: str, session: str, phases: list[list[str]], first: str) -> None:
    """A session as the proxy records it, with the compaction phases given per request: the
    chart's layout is what is under test, so the phases are chosen, not waited for."""
    store = Store(url)
    history: list[dict[str, Any]] = [{"role": "user", "content": first}]
    for i, fired in enumerate(phases):
        events = [
            {"strategy": p.split(":")[0], "phase": int(p.split(":")[1]) if ":" in p else None}
            for p in fired
        ]
        ref = store.record_request(
            new_request(
                session,
                list(history),
                request={"model": "qwen"},
                model="qwen",
                upstream="local",
                tokens_original=2000 * (i + 1),
                tokens_compiled=1500 + 100 * i,
                budget=6000,
                window=8000,
                pipeline=["traceback", "tiered"],
                events=events,
            )
        )
        answer = {"role": "assistant", "content": f"step {i}"}
        store.finish_exchange(
            ref,
            status=200,
            latency_ms=9,
            ttft_ms=None,
            response=answer,
            partial=False,
            usage=None,
            error=None,
        )
        history += [answer, {"role": "tool", "tool_call_id": f"c{i}", "content": "log " * 50}]
    store.close()


def legend_colors(browser: Any) -> dict[str, str]:
    """Each strategy's colour in the legend, as the browser paints it."""
    from selenium.webdriver.common.by import By

    return {
        k.get_attribute("data-strategy"): browser.execute_script(
            "return getComputedStyle(arguments[0], '::before').backgroundColor", k
        )
        for k in browser.find_elements(By.CSS_SELECTOR, ".legend .key.phase")
    }


CHANGING = [["tiered:1"], ["tiered:2", "traceback"], ["fold"], ["tiered:3"], ["sliding_window"]]


def test_browser_long_session_chart_stays_readable(
    browser: Any, artifacts: Path, start_proxy, settings_for
) -> None:
    from selenium.webdriver.common.by import By

    settings = settings_for()
    proxy: ServerThread = start_proxy(settings)
    # 30 requests whose phases change at every one: the worst case for the labels.
    seed_session(settings.database_url, "long", [CHANGING[i % 5] for i in range(30)], "Port it")
    seed_session(settings.database_url, "other", [["traceback"], ["tiered:2"]] * 3, "Fix it")

    browser.get(proxy.url + "/ui/sessions/long")
    chart = browser.find_element(By.CSS_SELECTOR, "svg#chart")
    labels = chart.find_elements(By.CSS_SELECTOR, "text.mlab")
    assert len(labels) >= 8, "the labels that fit are drawn"
    boxes = [lab.rect for lab in labels]
    frame = chart.rect
    for i, a in enumerate(boxes):
        assert frame["x"] <= a["x"] and a["x"] + a["width"] <= frame["x"] + frame["width"] - 2
        for b in boxes[i + 1 :]:
            apart = (
                a["x"] + a["width"] <= b["x"]
                or b["x"] + b["width"] <= a["x"]
                or a["y"] + a["height"] <= b["y"]
                or b["y"] + b["height"] <= a["y"]
            )
            assert apart, (a, b)
    # Every marker keeps its phases in a tooltip; every strategy is in the legend.
    markers = chart.find_elements(By.CSS_SELECTOR, ".marker")
    assert len(markers) == 30
    legend = legend_colors(browser)
    assert set(legend) == {"tiered", "traceback", "fold", "sliding_window"}
    # The log scale starts near the data (2,000 … 60,000), not at 1.
    assert chart.get_attribute("data-scale") == "log"
    ticks = [t.text for t in chart.find_elements(By.CSS_SELECTOR, "text.ylab")]
    assert ticks[0] == "1k" and "10" not in ticks and "100" not in ticks
    compiled = chart.find_element(By.CSS_SELECTOR, "polyline[data-series='compiled']")
    original = chart.find_element(By.CSS_SELECTOR, "polyline[data-series='original']")
    top, bottom = original.rect["y"], compiled.rect["y"] + compiled.rect["height"]
    assert bottom - top > 0.6 * frame["height"], "the data fills the chart's height"
    screenshot(browser, artifacts, "6-long-session")

    # The same strategy has the same colour in another session, whatever fired first there.
    browser.get(proxy.url + "/ui/sessions/other")
    other = legend_colors(browser)
    assert other == {s: legend[s] for s in ("tiered", "traceback")}
    assert len(set(legend.values())) == 4, legend  # four strategies, four colours
    for strategy in other:
        circle = browser.find_element(By.CSS_SELECTOR, f".marker[data-phases^='{strategy}'] circle")
        fill = browser.execute_script("return getComputedStyle(arguments[0]).fill", circle)
        assert fill == legend[strategy]
    screenshot(browser, artifacts, "7-other-session")


# A system prompt bigger than an 8,000-token window: compaction keeps it whole, so no view fits.
HUGE_SYSTEM = {"role": "system", "content": "Never run gcc -O2 -Wall main.c util.c. " * 1200}


def test_browser_shows_refusals_retries_and_failures_apart(
    browser: Any, artifacts: Path, start_proxy, settings_for, upstream_url: str, script
) -> None:
    import openai
    from selenium.webdriver.common.by import By

    proxy: ServerThread = start_proxy(small_window(settings_for, upstream_url))
    sdk = openai.OpenAI(
        base_url=proxy.url + "/v1",
        api_key="x",
        default_headers={"X-Session-Id": "trouble"},
        max_retries=2,
    )
    history: list[dict[str, Any]] = [{"role": "user", "content": "Read the build log."}]
    answer = sdk.chat.completions.create(model="echo", messages=history)  # 1: answered
    history.append({"role": "assistant", "content": answer.choices[0].message.content})
    history.append({"role": "user", "content": "Here are the rules for reading it."})
    # 2: refused: a system prompt (kept whole, always) bigger than the window.
    with pytest.raises(openai.BadRequestError):
        sdk.chat.completions.create(model="echo", messages=[HUGE_SYSTEM, *history])
    history[-1] = {"role": "user", "content": "Just the summary, then."}
    with pytest.raises(openai.InternalServerError):  # 3, 4, 5: a 503 the SDK retries twice
        sdk.chat.completions.create(model="fail-503", messages=history)

    # The list: one session named by its first message, 3 turns, 5 requests, 2 retries,
    # 4 failed; tokens saved over the one answered request, original before compiled.
    browser.get(proxy.url + "/ui/")
    row = browser.find_element(By.CSS_SELECTOR, "tr[data-session='trouble']")
    assert row.find_element(By.CSS_SELECTOR, "td.session a").text == "Read the build log."
    assert row.find_element(By.CSS_SELECTOR, ".turns").text == "3"
    assert row.find_element(By.CSS_SELECTOR, ".requests").text == "5 · 2 retries 4 failed"
    first = httpx.get(proxy.url + "/sessions/trouble/exchanges/1").json()["exchange"]
    tokens = row.find_element(By.CSS_SELECTOR, ".tokens").text
    assert tokens == f"{first['tokens_original']:,} → {first['tokens_compiled']:,}"
    screenshot(browser, artifacts, "8-sessions-with-failures")

    # The session: failed requests are crosses on the chart, tagged in the table.
    row.find_element(By.CSS_SELECTOR, "td.session a").click()
    crosses = browser.find_elements(By.CSS_SELECTOR, "svg#chart .failure")
    assert [c.get_attribute("data-turn") for c in crosses] == ["2", "3", "4", "5"]
    statuses = [
        r.find_element(By.CSS_SELECTOR, "td:nth-child(4)").text
        for r in browser.find_elements(By.CSS_SELECTOR, "table.turns tbody tr")
    ]
    assert statuses == [
        "200",
        "400 refused",
        "503 failed",
        "503 failed retry of 3",
        "503 failed retry of 3",
    ]
    screenshot(browser, artifacts, "9-session-with-failures")

    # The refused request: why, with the figures, and what was too big; nothing "dropped".
    browser.get(proxy.url + "/ui/sessions/trouble/exchanges/2")
    alert = browser.find_element(By.CSS_SELECTOR, "section.refused")
    detail = httpx.get(proxy.url + "/sessions/trouble/exchanges/2").json()["exchange"]
    assert detail["tokens_original"] >= detail["tokens_compiled"] > 8000 > detail["budget"] > 0
    assert "Refused: too big for the model's window" in alert.text
    assert "Nothing was sent upstream" in alert.text
    assert f"needs {detail['tokens_compiled']:,} tokens" in " ".join(alert.text.split())
    assert f"budget for the prompt is {detail['budget']:,}" in alert.text
    biggest = alert.find_element(By.CSS_SELECTOR, "table.largest tbody tr")
    assert biggest.text.startswith("#0 system") and "dropped" not in browser.page_source
    assert {
        r.get_attribute("data-status") for r in browser.find_elements(By.CSS_SELECTOR, ".msg-row")
    } == {"unsent"}
    assert "refused before anything was sent upstream" in browser.page_source
    screenshot(browser, artifacts, "10-refused")

    # The newest request links no next one, and a link past it is a page, not JSON.
    browser.get(proxy.url + "/ui/sessions/trouble/exchanges/5")
    siblings = browser.find_element(By.CSS_SELECTOR, "nav.siblings")
    assert "request 6" not in siblings.text and "the newest request" in siblings.text
    browser.get(proxy.url + "/ui/sessions/trouble/exchanges/6")
    assert browser.find_element(By.TAG_NAME, "h1").text == "No request 6 in this session"
    screenshot(browser, artifacts, "11-no-such-request")
    browser.find_element(By.LINK_TEXT, "the last one, request 5").click()
    assert "Request 5" in browser.find_element(By.TAG_NAME, "h1").text
    screenshot(browser, artifacts, "12-newest-request")
    missing = httpx.get(proxy.url + "/ui/sessions/trouble/exchanges/6")
    assert missing.status_code == 404 and missing.headers["content-type"].startswith("text/html")
