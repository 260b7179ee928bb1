"""The prompt cache as a real llama.cpp server saw it (xllamacpp + SmolLM2, 4,096 per slot):
every exchange's cached tokens recorded, each firing's turn flagged, net savings shown."""

from __future__ import annotations

import httpx
import pytest

from proxy.testing.cache_session import drive, table
from proxy.testing.llamacpp import LlamaServer

pytestmark = pytest.mark.llama


def test_a_40_turn_session_records_the_cache_and_why_it_broke(
    llama: LlamaServer, start_proxy, settings_for
) -> None:
    upstream = {"name": "llama", "kind": "llamacpp", "base_url": llama.base_url + "/v1"}
    proxy = start_proxy(settings_for(upstreams=[upstream]))
    rows = drive(proxy.url, "cache-40", 40)
    *exchanges, last = rows
    totals = last["totals"]
    print("\n" + table(rows))
    print(totals)
    assert len(exchanges) >= 40 and all(x["status"] == 200 for x in exchanges)
    # Every exchange's cached tokens, as llama.cpp reported them
    assert all(x["cached_tokens"] is not None for x in exchanges)
    fired = [x for x in exchanges if x["phases"] and x["cache_previous"]]
    assert fired, "a 40-turn session at 4k compacts"
    for x in fired:  # a firing that rewrote the view's prefix costs the cache: flagged so
        if x["cache_expected"] < 0.9 * x["cache_previous"]:
            assert x["cache_cause"] == "firing", x
            assert x["cached_tokens"] < x["cache_previous"]
    # Turns that only appended kept the cache: nothing flagged there
    kept = [x for x in exchanges[1:] if not x["phases"]]
    assert kept and not any(x["cache_cause"] == "firing" for x in kept)
    # Net savings: prefill tokens saved less the cache firings lost
    assert totals["cache_lost"] == sum(
        x["cache_lost"] for x in exchanges if x["cache_cause"] == "firing"
    )
    assert totals["cache_lost"] > 0
    assert totals["net_saved"] == totals["tokens_saved"] - totals["cache_lost"]
    metrics = httpx.get(proxy.url + "/metrics").text
    assert 'ctxproxy_net_saved_tokens{mode="compact",upstream="llama"}' in metrics
    page = httpx.get(proxy.url + "/ui/sessions/cache-40").text
    assert 'data-series="net saved"' in page and 'data-series="cached"' in page
    assert 'data-cause="firing"' in page
