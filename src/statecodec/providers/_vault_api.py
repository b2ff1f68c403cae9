"""Talking to Vault's HTTP API: the pooled client, one transit key's calls, and failures in safe words.

Threat: a Vault client that follows redirects sends its token elsewhere; one
without timeouts lets a silent Vault stall the event loop forever; one that
copies Vault's error text into messages may echo input. Here redirects are
refused, every call has a bounded connect and read timeout and no hidden
retries, and every failure becomes a fixed phrase (`Failure`) that names the
cause and nothing else. Used by `statecodec.providers.vault`.
"""

from __future__ import annotations

import base64
import binascii
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from statecodec.providers import missing_extra

try:
    import hvac
    import hvac.exceptions
    import requests
    import requests.adapters
except ImportError as _exc:  # pragma: no cover - exercised only without the extra
    raise missing_extra("hvac", "vault") from _exc

from statecodec.errors import ConfigurationError, ProviderError

__all__ = [
    "DEFAULT_TIMEOUT",
    "MAX_KEY_VERSION",
    "RELOGIN_INTERVAL",
    "AppRoleLogin",
    "Failure",
    "Transit",
    "b64",
    "call_failure",
    "check_timeout",
    "classify",
    "hint",
    "parse_vault_ciphertext",
    "unb64",
    "vault_client",
]

DEFAULT_TIMEOUT = (0.5, 1.0)
"""(connect, read) seconds for every Vault call: a stalled Vault costs at most this per token."""
RELOGIN_INTERVAL = 30.0
"""Least seconds between two AppRole logins after a refused call, so a real denial cannot loop."""
MAX_KEY_VERSION = 2**32 - 1

# Vault names: GenericNameRegex for keys, slash-separated segments for mounts.
_KEY_NAME = re.compile(r"\w(?:[\w.-]*\w)?", re.ASCII)
_MOUNT = re.compile(r"(?!\.{1,2}(?:/|$))[\w.-]+(?:/(?!\.{1,2}(?:/|$))[\w.-]+)*", re.ASCII)
_VAULT_CIPHERTEXT = re.compile(rb"vault:v([1-9][0-9]{0,9}):([A-Za-z0-9+/]+={0,2})")


# ---------------------------------------------------------------------------
# Connection


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
    timeout: float | tuple[float, float] = DEFAULT_TIMEOUT,
    pool_size: int = 10,
) -> hvac.Client:
    """An authenticated hvac client with a pooled session, bounded timeouts and no redirects.

    Exactly one of `token` or (`role_id`, `secret_id`) for AppRole, whose login
    happens here (a failure is a `ProviderError`). `verify` is True, False or a
    CA bundle path; `cert` is (certificate, key) paths for mutual TLS. Redirects
    are refused so the Vault token header never follows a redirect elsewhere.
    The caller owns the client: ``client.adapter.close()`` closes its pool.
    """
    # No user:password@ part: the address is named in every message and repr, and Vault
    # authenticates with its own token, never with credentials in the URL.
    if not isinstance(url, str) or not re.fullmatch(r"https?://[^\s/?#@]+/?", url):
        raise ConfigurationError(
            "the Vault address must be http(s)://host[:port] with no credentials in it, e.g. "
            "https://vault.example:8200 (set STATECODEC_VAULT_ADDR or VAULT_ADDR)"
        )
    approle = role_id is not None or secret_id is not None
    if (token is not None) == approle:
        raise ConfigurationError(
            "give exactly one Vault auth method: a token (STATECODEC_VAULT_TOKEN) or an AppRole "
            "role id and secret id (STATECODEC_VAULT_ROLE_ID, STATECODEC_VAULT_SECRET_ID)"
        )
    if approle and not (role_id and secret_id):
        raise ConfigurationError("AppRole auth needs both a role id and a secret id")
    if token is not None and not token.strip():
        raise ConfigurationError("the Vault token is empty")
    timeout = check_timeout(timeout)
    if not (isinstance(pool_size, int) and 1 <= pool_size <= 1000):
        raise ConfigurationError("pool_size must be an int from 1 to 1000")
    session = requests.Session()
    # No urllib3 retries: a retried call would multiply the bounded timeout.
    adapter = requests.adapters.HTTPAdapter(pool_connections=1, pool_maxsize=pool_size, max_retries=0)
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    # hvac lets a supplied session's own (default) verify/cert override the arguments: set them here.
    session.verify = verify
    session.cert = cert
    client = hvac.Client(
        url=url.rstrip("/"),
        token=token if token is not None else "",  # never hvac's fallback to VAULT_TOKEN or ~/.vault-token
        verify=verify,
        cert=cert,
        timeout=timeout,
        namespace=namespace or None,
        session=session,
        allow_redirects=False,
    )
    if role_id and secret_id:  # AppRole (both checked above)
        login = AppRoleLogin(client, role_id, secret_id, approle_mount_point)
        try:
            client.auth.approle.login(role_id=role_id, secret_id=secret_id, mount_point=approle_mount_point)
        except Exception as exc:
            failure = classify(exc)
        else:
            # Codecs and wrappers look for this to log in again when the token expires.
            client._statecodec_relogin = login
            return client
        client.adapter.close()
        raise ProviderError(f"AppRole login at {url} (auth mount {approle_mount_point!r}) failed: {failure.detail}")
    return client


class AppRoleLogin:
    """Logs an AppRole client in again after Vault refuses its token (expired or revoked).

    Holds the secret id: its repr shows the mount only, and it refuses pickling and copying.
    """

    __slots__ = ("_client", "_last", "_mount", "_role_id", "_secret_id")

    def __init__(self, client: Any, role_id: str, secret_id: str, mount: str) -> None:
        self._client = client
        self._role_id = role_id
        self._secret_id = secret_id
        self._mount = mount
        self._last = float("-inf")

    def __repr__(self) -> str:
        return f"AppRoleLogin(mount={self._mount!r})"

    def __reduce__(self) -> tuple[object, ...]:
        # Also refuses copy.copy and copy.deepcopy: no silent duplicate of a credential holder.
        raise TypeError("AppRoleLogin holds an AppRole secret id and is not picklable")

    def __call__(self) -> bool:
        """True when a new token was obtained; at most one attempt per `RELOGIN_INTERVAL`."""
        now = time.monotonic()
        if now - self._last < RELOGIN_INTERVAL:
            return False
        self._last = now
        try:
            self._client.auth.approle.login(role_id=self._role_id, secret_id=self._secret_id, mount_point=self._mount)
        except Exception:
            return False
        return True


def check_timeout(timeout: object) -> tuple[float, float]:
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        pair: tuple[object, ...] = (min(float(timeout), 0.5), float(timeout))
    elif isinstance(timeout, tuple) and len(timeout) == 2:
        pair = timeout
    else:
        raise ConfigurationError("timeout must be seconds or a (connect, read) pair of seconds")
    out: list[float] = []
    for t in pair:
        # Positive and bounded: an unbounded timeout would let one call stall the event loop forever.
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not (0 < t <= 60):
            raise ConfigurationError("Vault timeouts must be numbers of seconds in (0, 60]")
        out.append(float(t))
    return out[0], out[1]


# ---------------------------------------------------------------------------
# Calls and failures


@dataclass(frozen=True)
class Failure:
    """Why a Vault call failed, in words safe for a log (no token, key or payload)."""

    kind: str
    detail: str

    @property
    def outage(self) -> bool:
        """Vault could not answer at all: worth backing off, not a verdict on the token."""
        return self.kind in {"unreachable", "timeout", "sealed", "server", "throttled"}


_VAULT_ERRORS: tuple[tuple[str, str, str], ...] = (
    # (substring of Vault's error text, kind, detail)
    ("message authentication failed", "bad_ciphertext", "the ciphertext or its bound context did not verify"),
    ("invalid ciphertext length", "bad_ciphertext", "the ciphertext is too short"),
    ("too old", "retired", "the key version is below min_decryption_version (retired)"),
    ("too new", "retired", "the key version does not exist yet"),
    ("not found", "key_missing", "the transit key does not exist (deleted, or a wrong name or mount)"),
    ("missing 'context'", "rejected", "the key is derived and needs a context"),
)


def classify(exc: BaseException) -> Failure:
    """Map an hvac/requests exception to a `Failure`; texts are fixed, never Vault's echo of input."""
    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return Failure("unreachable", "connection timed out")
    if isinstance(exc, requests.exceptions.Timeout):
        return Failure("timeout", "Vault did not answer within the read timeout")
    if isinstance(exc, requests.exceptions.SSLError):
        return Failure("unreachable", "TLS handshake failed (check the CA bundle and client certificate)")
    if isinstance(exc, requests.exceptions.ConnectionError):
        return Failure("unreachable", "cannot connect to Vault")
    if isinstance(exc, hvac.exceptions.VaultError):
        text = " ".join(str(e) for e in (exc.errors or [])).lower() if isinstance(exc.errors, list) else ""
        if isinstance(exc, hvac.exceptions.InvalidRequest):
            for needle, kind, detail in _VAULT_ERRORS:
                if needle in text:
                    return Failure(kind, detail)
            return Failure("rejected", "Vault rejected the request (400)")
        if isinstance(exc, hvac.exceptions.Forbidden):
            return Failure("denied", "permission denied (the Vault token's policy does not allow this path)")
        if isinstance(exc, hvac.exceptions.Unauthorized):
            return Failure("denied", "unauthorized (the Vault token is missing or expired)")
        if isinstance(exc, hvac.exceptions.InvalidPath):
            return Failure("key_missing", "the transit key or mount does not exist (check the mount and key name)")
        if isinstance(exc, hvac.exceptions.VaultDown):
            return Failure("sealed", "Vault is sealed or in standby (503)")
        if isinstance(exc, hvac.exceptions.RateLimitExceeded):
            return Failure("throttled", "Vault rate limit exceeded (429)")
        if isinstance(exc, hvac.exceptions.VaultNotInitialized):
            return Failure("sealed", "Vault is not initialized (501)")
        if isinstance(exc, (hvac.exceptions.InternalServerError, hvac.exceptions.BadGateway)):
            return Failure("server", "Vault answered with a server error")
        return Failure("server", "Vault answered with an unexpected status")
    return Failure("unexpected", f"unexpected {type(exc).__name__} from the Vault client")


def call_failure(exc: BaseException, malformed: str = "malformed reply") -> Failure:
    """The `Failure` of an exception from `Transit.call`: its ValueError is a malformed reply."""
    return Failure("reply", malformed) if isinstance(exc, ValueError) else classify(exc)


class Transit:
    """One transit key on one mount: POSTs JSON and returns the response's ``data``."""

    __slots__ = ("_paths", "_post", "client", "key", "mount")

    def __init__(self, client: Any, key: str, mount_point: str) -> None:
        if not isinstance(key, str) or not _KEY_NAME.fullmatch(key):
            raise ConfigurationError(
                "the transit key name must be letters, digits, '_', '-' or '.', e.g. statecodec "
                "(set STATECODEC_VAULT_KEY)"
            )
        if not isinstance(mount_point, str) or not _MOUNT.fullmatch(mount_point.strip("/")):
            raise ConfigurationError("the transit mount must be a path such as 'transit' (STATECODEC_VAULT_MOUNT)")
        adapter: Any = getattr(client, "adapter", None)
        if not callable(getattr(adapter, "post", None)):
            raise ConfigurationError("client must be an hvac.Client (build one with vault_client(...))")
        self.client = client
        self.key = key
        self.mount = mount_point.strip("/")
        self._post: Callable[..., Any] = adapter.post
        self._paths = {op: f"/v1/{self.mount}/{op}/{key}" for op in ("encrypt", "decrypt", "rewrap", "datakey/wrapped")}
        self._paths["keys"] = f"/v1/{self.mount}/keys/{key}"

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("Transit holds a Vault client and its token and is not picklable")

    def describe(self) -> str:
        ns = getattr(self.client.adapter, "namespace", None)
        where = getattr(self.client, "url", "?")
        return f"vault transit key {self.mount}/{self.key}" + (f" (namespace {ns})" if ns else "") + f" at {where}"

    def call(self, op: str, body: dict[str, Any]) -> Mapping[str, Any]:
        """One round trip; raises whatever hvac/requests raise, or ValueError on a malformed reply.

        An AppRole client whose token Vault refused logs in again (rate-limited)
        and retries once, so a token that expired under a long-running server
        costs one extra login instead of an outage.
        """
        path = self._paths[op]
        try:
            reply = self._post(path, json=body)
        except (hvac.exceptions.Forbidden, hvac.exceptions.Unauthorized):
            relogin = getattr(self.client, "_statecodec_relogin", None)
            if relogin is None or not relogin():
                raise
            reply = self._post(path, json=body)
        return _data(reply)

    def read_key(self) -> Mapping[str, Any]:
        return _data(self.client.adapter.get(self._paths["keys"]))


def _data(reply: object) -> Mapping[str, Any]:
    """The ``data`` object of a Vault reply; ValueError when there is none."""
    data = reply.get("data") if isinstance(reply, dict) else None
    if not isinstance(data, dict):
        raise ValueError("reply without a data object")
    return data


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: object) -> bytes:
    """Strict standard base64 from a Vault reply (a payload or a data key); ValueError otherwise.

    The ValueError carries no chain: a UnicodeEncodeError would keep the whole text.
    """
    if not isinstance(text, str):
        raise ValueError("not a string")
    try:
        data: bytes | None = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        data = None
    if data is None:
        raise ValueError("not base64")
    return data


def parse_vault_ciphertext(text: object) -> tuple[int, bytes]:
    """(key version, raw ciphertext) of ``vault:vN:<base64>``; ValueError otherwise."""
    if not isinstance(text, str):
        raise ValueError("not a Vault ciphertext")
    m = _VAULT_CIPHERTEXT.fullmatch(text.encode("ascii", "replace"))
    if m is None:
        raise ValueError("not a Vault ciphertext")
    version = int(m.group(1))
    if version > MAX_KEY_VERSION:
        raise ValueError("key version out of range")
    return version, unb64(m.group(2).decode("ascii"))


def hint(failure: Failure, transit: Transit, ops: str) -> str:
    """How to fix `failure` of the space-separated `ops` (``keys`` is the read of the key's description)."""
    if failure.kind == "denied":
        names = ops.split()
        grants = f"'update' on {', '.join(f'{transit.mount}/{op}/{transit.key}' for op in names if op != 'keys')}"
        if "keys" in names:
            grants = f"'read' on {transit.mount}/keys/{transit.key} and {grants}"
        return f"; grant the token {grants}"
    if failure.kind == "key_missing":
        return f"; create it with: bao write -f {transit.mount}/keys/{transit.key} derived=true"
    if failure.kind == "sealed":
        return "; unseal Vault"
    return ""
