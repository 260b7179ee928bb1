"""`--peers` picks which peer proxies bench/overhead.py starts."""

import pytest

from bench import peer_proxies


def test_peers_named_are_the_only_ones_run() -> None:
    assert [p.name for p in peer_proxies.pick(["context-guardian"])] == ["context-guardian"]
    assert peer_proxies.pick(None) == peer_proxies.PEERS


def test_an_unknown_peer_is_refused() -> None:
    with pytest.raises(ValueError, match="nopeer"):
        peer_proxies.pick(["nopeer"])
