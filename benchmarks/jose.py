"""JOSE codecs against the general JOSE libraries, side by side in one run (not a test).

Measures seal and unseal of a ~300-byte payload for `JWECodec` (dir/A256GCM)
against joserfc and jwcrypto with the same key and header, and against
`AESGCMCodec` (the floor this format adds to); then `JWSCodec` (HS256)
against PyJWT and joserfc. Prints microseconds per operation and the ratios
the project tracks. Run: ``python benchmarks/jose.py [--repeat N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import timeit
from collections.abc import Callable

import jwt as pyjwt
from joserfc import jwe as rfc_jwe
from joserfc import jws as rfc_jws
from joserfc.jwk import OctKey
from jwcrypto import jwe as cr_jwe
from jwcrypto import jwk as cr_jwk

from statecodec import AESGCMCodec, JWECodec, JWSCodec, KeyRing
from statecodec._encoding import b64u_decode
from statecodec.jose import derived_jwk

PAYLOAD = json.dumps(
    {"v": 1, "iat": 1764676800, "exp": 1764677400, "m": "tools/call", "t": "book_flight",
     "a": "q1w2e3r4t5y6u7i8o9p0aa", "aud": "travel-server",
     "s": "step-2:" + "x" * 150}, separators=(",", ":")
).encode()


def measure(contenders: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """Best-of-`repeat` microseconds per call for each contender, timed round-robin.

    Interleaving the rounds exposes every contender to the same background
    load, so the ratios hold even on a busy machine; the minimum is the least
    noisy estimator of the cost itself.
    """
    timers = {name: timeit.Timer(fn) for name, fn in contenders.items()}
    numbers = {name: timer.autorange()[0] for name, timer in timers.items()}
    best = dict.fromkeys(contenders, float("inf"))
    for _ in range(repeat):
        for name, timer in timers.items():
            best[name] = min(best[name], timer.timeit(numbers[name]) / numbers[name] * 1e6)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    secret = os.urandom(32)
    ring = KeyRing([secret])
    jwk = derived_jwk(secret, "dir")
    header = {"alg": "dir", "enc": "A256GCM", "kid": jwk["kid"]}
    ours = JWECodec(ring)
    floor = AESGCMCodec(ring)
    rfc_key = OctKey.import_key(dict(jwk))
    cr_key = cr_jwk.JWK(**jwk)
    header_json = json.dumps(header)

    def rfc_seal() -> str:
        return rfc_jwe.encrypt_compact(header, PAYLOAD, rfc_key)

    def rfc_unseal(token: str) -> bytes:
        plaintext = rfc_jwe.decrypt_compact(token, rfc_key).plaintext
        assert plaintext is not None
        return plaintext

    def cr_seal() -> str:
        e = cr_jwe.JWE(PAYLOAD, header_json)
        e.add_recipient(cr_key)
        return str(e.serialize(compact=True))

    def cr_unseal(token: str) -> bytes:
        e = cr_jwe.JWE()
        e.deserialize(token, cr_key)
        return bytes(e.payload)

    t_ours, t_floor, t_rfc, t_cr = ours.seal(PAYLOAD), floor.seal(PAYLOAD), rfc_seal(), cr_seal()
    # Every contender opens every JWE contender's token: same format, same key.
    for token in (t_ours, t_rfc, t_cr):
        assert ours.unseal(token) == rfc_unseal(token) == cr_unseal(token) == PAYLOAD

    r = args.repeat
    t = measure(
        {
            "JWECodec dir/A256GCM seal": lambda: ours.seal(PAYLOAD),
            "JWECodec dir/A256GCM unseal": lambda: ours.unseal(t_ours),
            "AESGCMCodec seal": lambda: floor.seal(PAYLOAD),
            "AESGCMCodec unseal": lambda: floor.unseal(t_floor),
            "joserfc seal": rfc_seal,
            "joserfc unseal": lambda: rfc_unseal(t_rfc),
            "jwcrypto seal": cr_seal,
            "jwcrypto unseal": lambda: cr_unseal(t_cr),
        },
        r,
    )
    jwe_rows = {
        name: (t[f"{name} seal"], t[f"{name} unseal"])
        for name in ("JWECodec dir/A256GCM", "AESGCMCodec", "joserfc", "jwcrypto")
    }

    hs_jwk = derived_jwk(secret, "HS256")
    hs_key = b64u_decode(hs_jwk["k"])
    jws_ours = JWSCodec(ring)
    jws_rfc_key = OctKey.import_key(dict(hs_jwk))
    jws_header = {"alg": "HS256", "kid": hs_jwk["kid"]}
    s_ours = jws_ours.seal(PAYLOAD)
    s_rfc = rfc_jws.serialize_compact(jws_header, PAYLOAD, jws_rfc_key)
    s_py = pyjwt.api_jws.encode(PAYLOAD, hs_key, algorithm="HS256", headers={"kid": hs_jwk["kid"], "typ": None})
    for token in (s_ours, s_rfc, s_py):
        assert jws_ours.unseal(token) == PAYLOAD
    py_headers = {"kid": hs_jwk["kid"], "typ": None}
    t = measure(
        {
            "JWSCodec HS256 seal": lambda: jws_ours.seal(PAYLOAD),
            "JWSCodec HS256 unseal": lambda: jws_ours.unseal(s_ours),
            "PyJWT api_jws seal": lambda: pyjwt.api_jws.encode(
                PAYLOAD, hs_key, algorithm="HS256", headers=py_headers
            ),
            "PyJWT api_jws unseal": lambda: pyjwt.api_jws.decode(s_py, hs_key, algorithms=["HS256"]),
            "joserfc jws seal": lambda: rfc_jws.serialize_compact(jws_header, PAYLOAD, jws_rfc_key),
            "joserfc jws unseal": lambda: rfc_jws.deserialize_compact(s_rfc, jws_rfc_key),
        },
        r,
    )
    jws_rows = {
        name: (t[f"{name} seal"], t[f"{name} unseal"]) for name in ("JWSCodec HS256", "PyJWT api_jws", "joserfc jws")
    }

    print(f"payload: {len(PAYLOAD)} bytes; best of {r} runs; microseconds per operation")
    for title, rows, base in (("JWE", jwe_rows, "JWECodec dir/A256GCM"), ("JWS", jws_rows, "JWSCodec HS256")):
        print(f"\n{title:<24}{'seal':>10}{'unseal':>10}{'seal x':>10}{'unseal x':>10}   (x = time / {base})")
        seal0, unseal0 = rows[base]
        for name, (seal, unseal) in rows.items():
            print(f"{name:<24}{seal:>10.2f}{unseal:>10.2f}{seal / seal0:>10.2f}{unseal / unseal0:>10.2f}")
    seal0, unseal0 = jwe_rows["JWECodec dir/A256GCM"]
    fseal, funseal = jwe_rows["AESGCMCodec"]
    print("\ntargets: joserfc >= 3x, jwcrypto >= 10x slower than JWECodec; JWECodec <= 2x AESGCMCodec")
    for name in ("joserfc", "jwcrypto"):
        seal, unseal = jwe_rows[name]
        print(f"  {name}: seal {seal / seal0:.1f}x, unseal {unseal / unseal0:.1f}x")
    print(f"  JWECodec / AESGCMCodec: seal {seal0 / fseal:.2f}x, unseal {unseal0 / funseal:.2f}x")
    print(f"  token length: JWECodec {len(t_ours)}, AESGCMCodec {len(t_floor)}, joserfc {len(t_rfc)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
