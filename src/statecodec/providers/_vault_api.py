"""Vault's HTTP API: the client, and every failure in safe words.

Threat: a client that follows redirects sends its token elsewhere; one without timeouts lets a silent Vault hold
start-up for ever; a `requests` exception keeps the request and its ``X-Vault-Token`` header. Here redirects are
refused, calls have bounded timeouts and no hidden retries, and a failure is named by a fixed phrase.
"""

from __future__ import annotations

import base64
import binascii
import re

from statecodec._settings import seconds
from statecodec.errors import ConfigurationError, missing_extra

try:
    import hvac
    import hvac.exceptions
    import requests
    import requests.adapters
except ImportError as _exc:  # pragma: no cover - exercised only without the extra
    raise missing_extra("hvac", "vault") from _exc

# Slash-separated segments (no "." or ".."): a mount may not climb out of its path.
MOUNT = re.compile(r"(?!\.{1,2}(?:/|$))[\w.-]+(?:/(?!\.{1,2}(?:/|$))[\w.-]+)*", re.ASCII)
CIPHERTEXT = re.compile(r"vault:v[1-9][0-9]{0,9}:[A-Za-z0-9+/]+={0,2}")  # Vault's ciphertext text


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
    url: str, *, token: str, namespace: str | None = None, verify: bool | str = True,
    cert: tuple[str, str] | None = None, timeout: float | tuple[float, float] = 1.0,
) -> hvac.Client:
    """A client authenticated by `token`, with bounded timeouts, no retries of its own and no redirects.

    `timeout`: seconds to read (connect: at most 0.5), or (connect, read); a stalled Vault costs at most that per
    call. Close with ``client.adapter.close()``.
    """
    check_address(url)
    if not isinstance(token, str) or not token.strip():
        raise ConfigurationError("the Vault token is empty")
    pair = (min(timeout, 0.5), timeout) if isinstance(timeout, (int, float)) else timeout
    if not isinstance(pair, tuple) or len(pair) != 2:
        raise ConfigurationError("timeout must be seconds or a (connect, read) pair of seconds")
    # Positive and bounded: an unbounded timeout would let one call hold start-up for ever.
    connect, read = (seconds(f"the Vault {what} timeout", t, low=0, high=60, low_open=True) for what, t in (
        ("connect", pair[0]), ("read", pair[1])))
    session = requests.Session()
    # No urllib3 retries: a retried call would multiply the bounded timeout.
    adapter = requests.adapters.HTTPAdapter(pool_connections=1, max_retries=0)
    for scheme in ("https://", "http://"):
        session.mount(scheme, adapter)
    # hvac lets a supplied session's own (default) verify/cert override the arguments: set them here.
    session.verify, session.cert = verify, cert
    return hvac.Client(  # token: never hvac's fallback to VAULT_TOKEN or ~/.vault-token
        url=url.rstrip("/"), token=token, verify=verify, cert=cert, timeout=(float(connect), float(read)),
        namespace=namespace or None, session=session, allow_redirects=False,
    )


_E, _R = hvac.exceptions, requests.exceptions
_GRANT, _CREATE = "; grant the token 'update' on {path}", "; create it: bao write -f {key} derived=true"
_ERRORS: tuple[tuple[type[BaseException], str, str, bool], ...] = (
    # (exception, substring of Vault's error text, detail, Vault could not answer): the first that matches
    (_E.InvalidRequest, "authentication failed", "the wrapped key or its context did not verify", False),
    (_E.InvalidRequest, "invalid ciphertext length", "the wrapped key is too short", False),
    (_E.InvalidRequest, "too old", "the key version is below min_decryption_version (retired)", False),
    (_E.InvalidRequest, "too new", "the key version does not exist yet", False),
    (_E.InvalidRequest, "not found", "the transit key does not exist (deleted, or a wrong name)" + _CREATE, False),
    (_E.InvalidRequest, "", "Vault rejected the request (400)", False),
    (_E.Forbidden, "", "permission denied (the Vault token's policy does not allow this path)" + _GRANT, False),
    (_E.Unauthorized, "", "unauthorized (the Vault token is missing or expired)", False),
    (_E.InvalidPath, "", "the transit key or mount does not exist (check mount and name)" + _CREATE, False),
    (_E.VaultDown, "", "Vault is sealed or in standby (503); unseal Vault", True),
    (_E.RateLimitExceeded, "", "Vault rate limit exceeded (429)", True),
    (_E.VaultError, "", "Vault answered with a server error or an unexpected status", True),
    (_R.ConnectTimeout, "", "connection timed out", True),
    (_R.Timeout, "", "Vault did not answer within the read timeout", True),
    (_R.SSLError, "", "TLS handshake failed (check the CA bundle and client certificate)", True),
    (_R.ConnectionError, "", "cannot connect to Vault", True),
    (ValueError, "", "malformed reply", False),  # no data object, or not JSON
)


def failure(exc: BaseException) -> tuple[str, bool]:
    """(What an hvac/requests exception means and how to fix it, whether Vault could not answer). The text is fixed,
    never Vault's echo of the input; ``{path}`` in it stands for the call's path and ``{key}`` for the key's
    ``<mount>/keys/<name>`` path (for the command that creates it). Could not answer (down, sealed, throttled, silent,
    unreachable): worth a retry, not a verdict."""
    errors = getattr(exc, "errors", None)
    text = " ".join(str(e) for e in errors).lower() if isinstance(errors, list) else ""
    for cls, needle, detail, down in _ERRORS:
        if isinstance(exc, cls) and needle in text:
            return detail, down
    return f"unexpected {type(exc).__name__} from the Vault client", False


def unb64(text: object) -> bytes | None:
    """Strict standard base64 from a Vault reply (a data key), else None (no error keeps it)."""
    try:
        return base64.b64decode(text, validate=True) if isinstance(text, str) and text.isascii() else None
    except binascii.Error:
        return None
