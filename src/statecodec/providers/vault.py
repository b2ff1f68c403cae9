"""HashiCorp Vault / OpenBao transit as the `KeyWrapper` of an `EnvelopeCodec` (``pip install 'statecodec[vault]'``).

Threat: a wrapped data key replayed under another context, or made by another application under the same transit
key, must not unwrap: the context is bound on every call. Whoever reaches Vault with the right token can unwrap, so
the token is read at start-up, used for the unwraps, and the client closed; no message holds a Vault token, key
material or payload. Vault is never called per token. A client that follows redirects sends its token elsewhere;
one without timeouts lets a silent Vault hold start-up for ever; a `requests` exception keeps the request and its
``X-Vault-Token`` header: so redirects are refused, calls have bounded timeouts and no hidden retries, and a failure
is named by a fixed phrase. Policies and settings: docs/vault.md.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import Any

from statecodec._settings import named_errors, seconds, seconds_setting, setting, text_or_file
from statecodec.envelope import canonical_context
from statecodec.errors import ConfigurationError, ProviderError, needs_extra
from statecodec.providers import RetryPolicy, _ClientHolder

with needs_extra("hvac", "vault"):
    import hvac
    import hvac.exceptions
    import requests
    import requests.adapters

__all__ = ["VaultKeyWrapper", "vault_client"]

# Slash-separated segments (no "." or ".."): a mount may not climb out of its path.
_MOUNT = re.compile(r"(?!\.{1,2}(?:/|$))[\w.-]+(?:/(?!\.{1,2}(?:/|$))[\w.-]+)*", re.ASCII)
_CIPHERTEXT = re.compile(r"vault:v[1-9][0-9]{0,9}:[A-Za-z0-9+/]+={0,2}")  # Vault's ciphertext text


def _check_address(url: object) -> None:
    # No user:password@ part: the address is named in every message and repr.
    if not isinstance(url, str) or not re.fullmatch(r"https?://[^\s/?#@]+/?", url):
        raise ConfigurationError("the Vault address must be http(s)://host[:port] (no credentials in it)")


def _check_key_name(key: object) -> None:
    if not isinstance(key, str) or not re.fullmatch(r"\w(?:[\w.-]*\w)?", key, re.ASCII):  # Vault's key names
        raise ConfigurationError("the transit key name must be letters, digits, '_', '-' or '.', e.g. statecodec")


def vault_client(
    url: str, *, token: str, namespace: str | None = None, verify: bool | str = True,
    cert: tuple[str, str] | None = None, timeout: float | tuple[float, float] = 1.0,
) -> hvac.Client:
    """A client authenticated by `token`, with bounded timeouts, no retries of its own and no redirects. `timeout`:
    seconds to read (connect: at most 0.5), or (connect, read); a stalled Vault costs at most that per call. Close
    with ``client.adapter.close()``."""
    _check_address(url)
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


def _failure(exc: BaseException) -> tuple[str, bool]:
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


class VaultKeyWrapper(_ClientHolder):
    """A Vault transit key as a `KeyWrapper`: a wrapped key opens only under the context it was made for, bound as
    AES-GCM associated data and, on a derived key (recommended), as the key-derivation context too. A wrapped blob is
    Vault's ciphertext text, ``vault:vN:<base64>``, as ASCII bytes. `client`: from `vault_client`; `owns_client`
    (built from settings): `close()` closes its connection pool."""

    __slots__ = ("_key", "_mount")
    _FAILURES = (Exception,)  # every hvac and `requests` error, and a malformed reply (see `_failure`)

    def __init__(
        self, client: Any, key: str, *, mount_point: str = "transit", retry: RetryPolicy | None = None,
        owns_client: bool = False,
    ) -> None:
        _check_key_name(key)
        if not isinstance(mount_point, str) or not _MOUNT.fullmatch(mount_point.strip("/")):
            raise ConfigurationError("the transit mount must be a path such as 'transit'")
        if not callable(getattr(getattr(client, "adapter", None), "post", None)):
            raise ConfigurationError("client must be an hvac.Client (build one with vault_client(...))")
        super().__init__(retry, RetryPolicy(attempts=3, base_delay=0.1, max_delay=1.0))
        self._client, self._key, self._mount = client, key, mount_point.strip("/")
        if owns_client:
            self._close_owned = client.adapter.close

    def describe(self) -> str:
        ns = f" (namespace {self._client.adapter.namespace})" if self._client.adapter.namespace else ""
        return f"vault transit key {self._mount}/{self._key}{ns} at {self._client.url}"

    def _call(self, op: str, context: Mapping[str, str], **fields: object) -> Mapping[str, Any]:
        """Vault's ``data`` for ``<mount>/<op>/<key>`` under `context`, retried while Vault cannot answer."""
        bound = base64.b64encode(canonical_context(context)).decode("ascii")
        body = {**fields, "context": bound, "associated_data": bound}

        def post() -> Mapping[str, Any]:
            reply = self._client.adapter.post(f"/v1/{self._mount}/{op}/{self._key}", json=body)
            data = reply.get("data") if isinstance(reply, dict) else None
            if not isinstance(data, dict):
                raise ValueError("reply without a data object")
            return data

        return self._call_provider(post, op, lambda exc: _failure(exc)[1])

    def _cause(self, exc: Exception, operation: str) -> str:
        path, key = f"{self._mount}/{operation}/{self._key}", f"{self._mount}/keys/{self._key}"
        return f"transit {operation} failed: {_failure(exc)[0].format(path=path, key=key)}"

    def new_wrapped_key(self, context: Mapping[str, str]) -> bytes:
        """A fresh 256-bit data key from ``transit/datakey/wrapped``; Vault never returns it in clear."""
        ciphertext = self._call("datakey/wrapped", context, bits=256).get("ciphertext")
        if not (isinstance(ciphertext, str) and _CIPHERTEXT.fullmatch(ciphertext)):
            raise ProviderError(f"{self.describe()}: Vault returned a malformed ciphertext")
        return ciphertext.encode("ascii")

    def unwrap(self, blob: bytes, context: Mapping[str, str]) -> bytes:
        """The data key in `blob`, via ``transit/decrypt`` under `context`; `ProviderError` otherwise."""
        ciphertext = blob.decode("ascii", "replace") if isinstance(blob, bytes) else ""  # sized by EnvelopeCodec
        if not _CIPHERTEXT.fullmatch(ciphertext):  # made by another provider?
            raise ProviderError(f"{self.describe()}: the wrapped key is not a Vault transit ciphertext (vault:vN:...)")
        text = self._call("decrypt", context, ciphertext=ciphertext).get("plaintext")
        try:  # strict standard base64
            key = base64.b64decode(text, validate=True) if isinstance(text, str) and text.isascii() else None
        except binascii.Error:
            key = None
        if key is None:  # raised out here, with no error chained to it (the reply holds the data key)
            raise ProviderError(f"{self.describe()}: Vault returned a malformed plaintext")
        return key


# From settings (`statecodec.config`, `statecodec kms`): the STATECODEC_VAULT_* table in docs/vault.md.
_VAULT_NAMES = {"ADDR", "TOKEN", "NAMESPACE", "CACERT", "CLIENT_CERT", "CLIENT_KEY", "SKIP_VERIFY"}


def _get(settings: Mapping[str, str], name: str) -> str | None:
    """``STATECODEC_VAULT_<name>``, else the standard ``VAULT_<name>`` where there is one, else None."""
    value = setting(settings, f"STATECODEC_VAULT_{name}", required=False)
    return setting(settings, f"VAULT_{name}", required=False) if value is None and name in _VAULT_NAMES else value


def vault_client_from_env(settings: Mapping[str, str]) -> Any:
    """An `hvac.Client` from the STATECODEC_VAULT_* settings (else the standard VAULT_* ones); close it after use."""
    url = _get(settings, "ADDR")
    if url is None:
        raise ConfigurationError("STATECODEC_VAULT_ADDR (or VAULT_ADDR) is not set; e.g. https://vault.example:8200")
    with named_errors("STATECODEC_VAULT_ADDR (or VAULT_ADDR)"):
        _check_address(url)
    # The token, or the file a Vault Agent sidecar keeps it in (not both; 64 KiB, room to spare); else VAULT_TOKEN.
    token, source = text_or_file(settings, "STATECODEC_VAULT_TOKEN", 64 * 1024, "hold one secret")
    if token is not None and not token.strip():
        raise ConfigurationError(f"{source} is empty")
    token = token.strip() if token is not None else _get(settings, "TOKEN")
    if token is None:
        raise ConfigurationError("no Vault token: set STATECODEC_VAULT_TOKEN_FILE (e.g. the token file Vault Agent "
                                 "writes), or STATECODEC_VAULT_TOKEN (or VAULT_TOKEN)")
    skip = (_get(settings, "SKIP_VERIFY") or "false").lower()
    if skip not in {"true", "false", "1", "0"}:
        raise ConfigurationError("STATECODEC_VAULT_SKIP_VERIFY must be true or false")
    cert, cert_key = _get(settings, "CLIENT_CERT"), _get(settings, "CLIENT_KEY")
    if (cert is None) != (cert_key is None):
        raise ConfigurationError("set both STATECODEC_VAULT_CLIENT_CERT and STATECODEC_VAULT_CLIENT_KEY, or neither")
    return vault_client(  # the timeout's default, 1 s, is vault_client's
        url, token=token, namespace=_get(settings, "NAMESPACE"),
        verify=False if skip in {"true", "1"} else _get(settings, "CACERT") or True,
        cert=(cert, cert_key) if cert is not None and cert_key is not None else None,
        timeout=seconds_setting(settings, "STATECODEC_VAULT_TIMEOUT", default=1.0, low=0, high=60, low_open=True),
    )


def wrapper_from_env(settings: Mapping[str, str]) -> VaultKeyWrapper:  # STATECODEC_CODEC=vault-envelope
    """A `VaultKeyWrapper` that owns its client; close it after use."""
    key = setting(settings, "STATECODEC_VAULT_KEY") or ""
    with named_errors("STATECODEC_VAULT_KEY"):
        _check_key_name(key)
    client = vault_client_from_env(settings)
    try:
        return VaultKeyWrapper(client, key, mount_point=_get(settings, "MOUNT") or "transit", owns_client=True)
    except BaseException:
        client.adapter.close()
        raise
