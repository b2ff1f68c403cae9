"""An emergency key pull across a fleet: three server processes, one Redis, one key file, flows running, no restart.

The operator runs `statecodec rotate pull` of the primary key, then of a demoted one. Each time, a token forged under
the pulled key (a real round-1 state, opened and sealed again under it, as its thief would) completes a flow before the
pull and is refused on every instance within two polls after it, and every flow whose state was sealed under another
key completes.
"""

from __future__ import annotations

import time

import anyio
import httpx
import pytest
from tests.integration.fleet_harness import KEEPALIVE_EXPIRY_S, FleetServer, fleet, flow, present, retry, round_one
from tests.integration.test_fleet_rotation import rotate
from tests.plugins.redis import RedisServer

from statecodec import AESGCMCodec, format_keys, generate_key
from statecodec._encoding import b64u_decode
from statecodec.keys import KeyRing

pytestmark = pytest.mark.integration

POLL = 0.5  # STATECODEC_RELOAD_INTERVAL: a pull must reach every instance within two of them
FLOWS_AT_ONCE = 3


def key_id(state: str) -> str:
    return b64u_decode(state)[1:5].hex()  # version byte, then the 4-byte key id (docs/formats.md)


def test_pull_of_the_primary_then_of_a_demoted_key_refuses_forged_tokens_everywhere_within_two_polls(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = [generate_key() for _ in range(3)]
    ring = tmp_path_factory.mktemp("keys") / "ring"
    ring.write_text("\n".join(format_keys([key]) for key in keys) + "\n", encoding="utf-8")
    with RedisServer() as redis:
        shared = {"STATECODEC_STORE_URL": redis.url, "STATECODEC_STORE_TIMEOUT": "5", "STATECODEC_KEYS_FILE": str(ring)}
        for name, value in shared.items():  # the operator's
            monkeypatch.setenv(name, value)
        server = shared | {"STATECODEC_RELOAD_INTERVAL": str(POLL), "FLEET_DEMO_AUTH": "1"}
        with fleet(tmp_path_factory.mktemp("pull-logs"), [server | {"STATECODEC_INSTANCE": f"web-{i}"}
                                                           for i in range(3)]) as servers:
            outcomes, refused_after = anyio.run(lambda: pulls_under_load(servers, keys))
            logs = [server.log_text() for server in servers]
    ids = KeyRing(keys).key_ids
    print(f"\nrefused on every instance after the pull of the primary: {refused_after[0]:.2f} s, of a demoted key: "
          f"{refused_after[1]:.2f} s (poll {POLL} s); flows {outcomes}")
    assert max(refused_after) <= 2 * POLL + 0.5, refused_after  # two polls, and the requests that show it
    assert outcomes["dropped under another key"] == 0, logs
    assert outcomes["completed"] >= FLOWS_AT_ONCE
    for log in logs:  # an incident on every instance, naming the key id and no key
        assert f"CRITICAL:statecodec.reload:statecodec: key {ids[0]} pulled" in log
        assert f"CRITICAL:statecodec.reload:statecodec: key {ids[2]} pulled" in log
        assert "requestState rejected on tools/call: unknown_key" in log  # the forged token, and no other cause
        assert not any(format_keys([key]) in log for key in keys)


async def pulls_under_load(servers: list[FleetServer], keys: list[bytes]) -> tuple[dict[str, int], list[float]]:
    """(flows completed, and dropped by key, while the operator pulls; the seconds after each pull until a forged token
    was refused on every instance)."""
    ids = KeyRing(keys).key_ids
    pulled: set[str] = set()
    outcomes = {"completed": 0, "dropped under a pulled key": 0, "dropped under another key": 0}
    limits = httpx.Limits(max_connections=FLOWS_AT_ONCE * 4, keepalive_expiry=KEEPALIVE_EXPIRY_S)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client, anyio.create_task_group() as group:
        running = True

        async def flows(n: int) -> None:
            while running:
                state = await round_one(client, servers[n % 3], subject=f"user-{n}")
                kid = key_id(state)
                if await retry(client, servers[(n + 1) % 3], state, subject=f"user-{n}"):
                    outcomes["completed"] += 1
                else:
                    outcomes["dropped under a pulled key" if kid in pulled else "dropped under another key"] += 1
                n += 1

        for n in range(FLOWS_AT_ONCE):
            group.start_soon(flows, n)
        refused_after = []
        for leaked, by in ((0, 0), (2, 1)):  # the primary, then a demoted key (by key 1, which seals after the first)
            state = await round_one(client, servers[0], subject="victim")
            assert key_id(state) == ids[by]
            forged = AESGCMCodec(keys[leaked:leaked + 1]).seal(AESGCMCodec(keys[by:by + 1]).unseal(state))
            assert await retry(client, servers[1], forged, subject="victim")  # the forgery works until the pull
            pulled.add(ids[leaked])
            start, waiting = time.monotonic(), set(range(3))  # the command's own time counts
            code, result = await rotate("pull", ids[leaked])
            assert (code, result["pulled"]) == (0, ids[leaked])
            while waiting:
                for i in list(waiting):
                    if "error" in await present(client, servers[i], forged, subject="victim"):
                        waiting.discard(i)
                assert time.monotonic() - start < 30, "a pulled key was still honoured"
            refused_after.append(time.monotonic() - start)
        assert await flow(client, servers[2], servers[0], "after")  # no restart: the fleet still serves
        running = False
    return outcomes, refused_after
