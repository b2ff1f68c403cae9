"""Vault's HTTP API: the client, AppRole login, one transit key's calls, and failures in safe words.

Threat: a client that follows redirects sends its token elsewhere; one without timeouts lets a silent Vault
stall the event loop; a `requests` exception keeps the request and its ``X-Vault-Token`` header. Here redirects
are refused, calls have bounded timeouts and no hidden retries, and end in Vault's ``data`` or a `Failure`.
"""

from __future__ import annotations

import base64
import binascii
import enum
import re
import time
from collections.abc import Mapping
from typing import Any, NamedTuple

from statecodec._settings import seconds
from statecodec._types import HoldsSecrets
from statecodec.errors import ConfigurationError, ProviderError
from statecodec.providers import _ClientHolder, missing_extra
from statecodec.providers._retry import RetryPolicy, call_with_retries

try:
    import hvac
    import hvac.exceptions
    import requests
    import requests.adapters
except ImportError as _exc:  # pragma: no cover - exercised only without the extra
    raise missing_extra("hvac", "vault") from _exc

# Slash-separated segments (no "." or ".."): a mount may not climb out of its path.
_MOUNT = re.compile(r"(?!\.{1,2}(?:/|$))[\w.-]+(?:/(?!\.{1,2}(?:/|$))[\w.-]+)*", re.ASCII)
_ONCE = RetryPolicy(attempts=1)


def check_address(url: object) -> None:
    """Refuse a Vault address that is not http(s)://host[:port]."""
    # No user:password@ part: the address is named in every message and repr.
    if not isinstance(url, str) or not re.fullmatch(r"https?://[^\s/?#@]+/?", url):
        raise ConfigurationError("the Vault address must be http(s)://host[:port] (no credentials in it)")


def check_key_name(key: object) -> None:
    """Refuse a transit key name Vault would not accept."""
    if not isinstance(key, str) or not re.fullmatch(r"\w(?:[\w.-]*\w)?", key, re.ASCII):  # Vault's key names
        raise ConfigurationError("the transit key name must be letters, digits, '_', '-' or '.', e.g. statecodec")


def vault_client(
    url: str,
    *,
    token: str | None = None,
    role_id: str | None = None,
    secret_id: str | None = None,
    approle_mount_point: str = "approle",
    namespace: str | None = None,
    verify: bool | str = True,
    cert: tuple[str, str] | None = None,
    timeout: float | tuple[float, float] = 1.0,
    pool_size: int = 10,
) -> hvac.Client:
    """An authenticated hvac client with a pooled session, bounded timeouts and no redirects.

    `token`, or AppRole (`role_id`, `secret_id`; logged in here). `timeout`: seconds to read (connect: at most
    0.5), or (connect, read); a stalled Vault costs at most that per call. Close with ``client.adapter.close()``.
    """
    check_address(url)
    approle = role_id is not None or secret_id is not None
    if (token is not None) == approle or (approle and not (role_id and secret_id)):
        raise ConfigurationError("give exactly one Vault auth: a token, or an AppRole role id and secret id (both)")
    if token is not None and not token.strip():
        raise ConfigurationError("the Vault token is empty")
    pair = (min(timeout, 0.5), timeout) if isinstance(timeout, (int, float)) else timeout
    if not isinstance(pair, tuple) or len(pair) != 2:
        raise ConfigurationError("timeout must be seconds or a (connect, read) pair of seconds")
    # Positive and bounded: an unbounded timeout would let one call stall the event loop forever.
    connect, read = (seconds(f"the Vault {what} timeout", t, low=0, high=60, low_open=True) for what, t in (
        ("connect", pair[0]), ("read", pair[1])))
    if not (isinstance(pool_size, int) and 1 <= pool_size <= 1000):
        raise ConfigurationError("pool_size must be an int from 1 to 1000")
    session = requests.Session()
    # No urllib3 retries: a retried call would multiply the bounded timeout.
    adapter = requests.adapters.HTTPAdapter(pool_connections=1, pool_maxsize=pool_size, max_retries=0)
    for scheme in ("https://", "http://"):
        session.mount(scheme, adapter)
    # hvac lets a supplied session's own (default) verify/cert override the arguments: set them here.
    session.verify, session.cert = verify, cert
    client = hvac.Client(
        url=url.rstrip("/"),
        token=token or "",  # never hvac's fallback to VAULT_TOKEN or ~/.vault-token
        verify=verify,
        cert=cert,
        timeout=(float(connect), float(read)),
        namespace=namespace or None,
        session=session,
        allow_redirects=False,
    )
    if role_id and secret_id:
        login = AppRoleLogin(client, role_id, secret_id, approle_mount_point)
        failure = login.login()
        if failure is not None:
            client.adapter.close()
            raise ProviderError(f"AppRole login at {url} (auth mount {approle_mount_point!r}) failed: {failure.detail}")
        client._statecodec_relogin = login  # `TransitKey` logs in again with it when Vault refuses the token
    return client


class AppRoleLogin(HoldsSecrets):
    """Logs an AppRole client in; holds the secret id (the default repr shows no field)."""

    __slots__ = ("_client", "_last", "_mount", "_role_id", "_secret_id")

    def __init__(self, client: Any, role_id: str, secret_id: str, mount: str) -> None:
        self._client, self._role_id, self._secret_id, self._mount = client, role_id, secret_id, mount
        self._last = float("-inf")

    def login(self) -> Failure | None:
        try:
            self._client.auth.approle.login(role_id=self._role_id, secret_id=self._secret_id, mount_point=self._mount)
        except Exception as exc:
            return classify(exc)
        return None

    def relogin(self) -> bool:
        """After Vault refused the token: True once a new one is obtained; tried at most every 30 s (no loop)."""
        if time.monotonic() - self._last < 30.0:
            return False
        self._last = time.monotonic()
        return self.login() is None


class FailureKind(enum.Enum):
    OUTAGE = "outage"  # Vault could not answer: wait and retry; not a verdict on the token
    BAD_CIPHERTEXT = "bad_ciphertext"
    RETIRED = "retired"
    DENIED = "denied"
    KEY_MISSING = "key_missing"
    OTHER = "other"


class Failure(NamedTuple):
    """Why a Vault call failed, in words safe for a log (no token, key or payload)."""

    kind: FailureKind
    detail: str


_K, _E, _R = FailureKind, hvac.exceptions, requests.exceptions
_ERRORS: tuple[tuple[type[BaseException], str, FailureKind, str], ...] = (
    # (exception, substring of Vault's error text, kind, detail): the first that matches
    (_E.InvalidRequest, "authentication failed", _K.BAD_CIPHERTEXT, "the ciphertext or its context did not verify"),
    (_E.InvalidRequest, "invalid ciphertext length", _K.BAD_CIPHERTEXT, "the ciphertext is too short"),
    (_E.InvalidRequest, "too old", _K.RETIRED, "the key version is below min_decryption_version (retired)"),
    (_E.InvalidRequest, "too new", _K.RETIRED, "the key version does not exist yet"),
    (_E.InvalidRequest, "not found", _K.KEY_MISSING, "the transit key does not exist (deleted, or a wrong name)"),
    (_E.InvalidRequest, "missing 'context'", _K.OTHER, "the key is derived and needs a context"),
    (_E.InvalidRequest, "", _K.OTHER, "Vault rejected the request (400)"),
    (_E.Forbidden, "", _K.DENIED, "permission denied (the Vault token's policy does not allow this path)"),
    (_E.Unauthorized, "", _K.DENIED, "unauthorized (the Vault token is missing or expired)"),
    (_E.InvalidPath, "", _K.KEY_MISSING, "the transit key or mount does not exist (check mount and name)"),
    (_E.VaultDown, "", _K.OUTAGE, "Vault is sealed or in standby (503); unseal Vault"),
    (_E.RateLimitExceeded, "", _K.OUTAGE, "Vault rate limit exceeded (429)"),
    (_E.VaultError, "", _K.OUTAGE, "Vault answered with a server error or an unexpected status"),
    (_R.ConnectTimeout, "", _K.OUTAGE, "connection timed out"),
    (_R.Timeout, "", _K.OUTAGE, "Vault did not answer within the read timeout"),
    (_R.SSLError, "", _K.OUTAGE, "TLS handshake failed (check the CA bundle and client certificate)"),
    (_R.ConnectionError, "", _K.OUTAGE, "cannot connect to Vault"),
    (ValueError, "", _K.OTHER, "malformed reply"),  # no data object, or not JSON
)


def classify(exc: BaseException) -> Failure:
    """The `Failure` of an hvac/requests exception: fixed texts, never Vault's echo of the input."""
    errors = getattr(exc, "errors", None)
    text = " ".join(str(e) for e in errors).lower() if isinstance(errors, list) else ""
    for cls, needle, kind, detail in _ERRORS:
        if isinstance(exc, cls) and needle in text:
            return Failure(kind, detail)
    return Failure(_K.OTHER, f"unexpected {type(exc).__name__} from the Vault client")


def _outage(exc: BaseException) -> bool:
    return classify(exc).kind is _K.OUTAGE


class TransitKey(_ClientHolder):
    """One transit key over a client from `vault_client`, and with it the Vault token: the base of the
    Vault wrapper and codec; `owns_client` (built from settings): `close()` closes its connection pool."""

    __slots__ = ("_client", "_key", "_mount")

    def __init__(self, client: Any, key: str, mount_point: str, owns_client: bool) -> None:
        check_key_name(key)
        if not isinstance(mount_point, str) or not _MOUNT.fullmatch(mount_point.strip("/")):
            raise ConfigurationError("the transit mount must be a path such as 'transit'")
        if not callable(getattr(getattr(client, "adapter", None), "post", None)):
            raise ConfigurationError("client must be an hvac.Client (build one with vault_client(...))")
        self._client, self._key, self._mount = client, key, mount_point.strip("/")
        self._close_owned = client.adapter.close if owns_client else None

    def describe(self) -> str:
        ns = f" (namespace {self._client.adapter.namespace})" if self._client.adapter.namespace else ""
        return f"vault transit key {self._mount}/{self._key}{ns} at {self._client.url}"

    def _request(
        self, op: str, body: dict[str, Any] | None = None, retry: RetryPolicy | None = None
    ) -> Mapping[str, Any] | Failure:
        """Vault's ``data`` for ``<mount>/<op>/<key>`` (a read when `body` is None), or why not (never raised)."""
        try:
            return call_with_retries(lambda: self._round_trip(op, body), transient=_outage, policy=retry or _ONCE)
        except Exception as exc:
            return self._fix(classify(exc), op)

    def _round_trip(self, op: str, body: dict[str, Any] | None) -> Mapping[str, Any]:
        # An AppRole client whose token Vault refused logs in again (rate-limited) and retries once:
        # a token that expires under a long-running server costs one login, not an outage.
        adapter, path = self._client.adapter, f"/v1/{self._mount}/{op}/{self._key}"
        try:
            reply = adapter.get(path) if body is None else adapter.post(path, json=body)
        except (hvac.exceptions.Forbidden, hvac.exceptions.Unauthorized):
            login = getattr(self._client, "_statecodec_relogin", None)
            if login is None or not login.relogin():
                raise
            reply = adapter.get(path) if body is None else adapter.post(path, json=body)
        data = reply.get("data") if isinstance(reply, dict) else None
        if not isinstance(data, dict):
            raise ValueError("reply without a data object")
        return data

    def _fix(self, failure: Failure, op: str) -> Failure:
        """`failure` with how to fix it: the grant the Vault token lacks, or how to create the missing key."""
        path = f"{self._mount}/keys/{self._key}"
        grant = f"'read' on {path}" if op == "keys" else f"'update' on {self._mount}/{op}/{self._key}"
        fixes = {_K.DENIED: f"grant the token {grant}", _K.KEY_MISSING: f"create it: bao write -f {path} derived=true"}
        return Failure(failure.kind, f"{failure.detail}; {fixes[failure.kind]}") if failure.kind in fixes else failure


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: object) -> bytes | None:
    """Strict standard base64 from a Vault reply (a payload or a data key), else None (no error keeps it)."""
    try:
        return base64.b64decode(text, validate=True) if isinstance(text, str) and text.isascii() else None
    except binascii.Error:
        return None


def parse_ciphertext(text: object) -> tuple[int, bytes] | None:
    """(key version, raw ciphertext) of ``vault:vN:<base64>``, else None."""
    m = re.fullmatch(r"vault:v([1-9][0-9]{0,9}):([A-Za-z0-9+/]+={0,2})", text) if isinstance(text, str) else None
    raw = unb64(m.group(2)) if m is not None and int(m.group(1)) < 2**32 else None
    return None if m is None or raw is None else (int(m.group(1)), raw)
