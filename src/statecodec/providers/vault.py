"""HashiCorp Vault / OpenBao transit (``pip install 'statecodec[vault]'``): a data-key wrapper and a per-token codec.

Threat: the transit key never leaves Vault, so whoever reaches Vault with the right token can mint or open
state, and whoever makes Vault unreachable stops every per-token call. `VaultKeyWrapper` (for `EnvelopeCodec`,
recommended) needs Vault at start-up only; `VaultTransitCodec` calls it for every token. Both take a client
from `vault_client`. No message holds a Vault token, key material, payload or token.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from statecodec._settings import max_token_length_setting, setting, text_or_file
from statecodec.envelope import EnvelopeCodec, canonical_context
from statecodec.errors import ConfigurationError, ProviderError
from statecodec.providers import build_envelope_codec, context_setting
from statecodec.providers._retry import RetryPolicy, check_retry
from statecodec.providers._vault_api import Failure, TransitKey, b64, parse_vault_ciphertext, unb64, vault_client
from statecodec.providers._vault_transit import VaultTransitCodec

__all__ = ["VaultKeyWrapper", "VaultTransitCodec", "vault_client"]

_MAX_SECRET_FILE_BYTES = 64 * 1024  # a token or secret id, with room to spare


class VaultKeyWrapper(TransitKey):
    """A Vault transit key as a `KeyWrapper`: a wrapped key opens only under the context it was made for.

    The context is bound as AES-GCM associated data and, on a derived key (recommended), as the key-derivation
    context too. A wrapped blob is Vault's ciphertext text, ``vault:vN:<base64>``, as ASCII bytes.
    """

    __slots__ = ("_retry",)

    def __init__(
        self,
        client: Any,
        key: str,
        *,
        mount_point: str = "transit",
        retry: RetryPolicy | None = None,
        owns_client: bool = False,
    ) -> None:
        super().__init__(client, key, mount_point, owns_client)
        self._retry = check_retry(retry, RetryPolicy(attempts=3, base_delay=0.1, max_delay=1.0))

    def _call(self, op: str, context: Mapping[str, str], **fields: object) -> Mapping[str, Any]:
        bound = b64(canonical_context(context))
        out = self._request(op, {**fields, "context": bound, "associated_data": bound}, self._retry)
        if isinstance(out, Failure):
            raise ProviderError(f"transit {op} on {self._mount}/{self._key} failed: {out.detail}")
        return out

    def new_wrapped_key(self, context: Mapping[str, str]) -> bytes:
        """A fresh 256-bit data key from ``transit/datakey/wrapped``; Vault never returns it in clear."""
        ciphertext = self._call("datakey/wrapped", context, bits=256).get("ciphertext")
        if parse_vault_ciphertext(ciphertext) is None:
            raise ProviderError(f"{self.describe()}: Vault returned a malformed ciphertext")
        return str(ciphertext).encode("ascii")

    def unwrap(self, blob: bytes, context: Mapping[str, str]) -> bytes:
        """The data key in `blob`, via ``transit/decrypt`` under `context`; `ProviderError` otherwise."""
        ciphertext = blob.decode("ascii", "replace") if isinstance(blob, bytes) else ""  # sized by EnvelopeCodec
        if parse_vault_ciphertext(ciphertext) is None:  # made by another provider?
            raise ProviderError(f"{self.describe()}: the wrapped key is not a Vault transit ciphertext (vault:vN:...)")
        key = unb64(self._call("decrypt", context, ciphertext=ciphertext).get("plaintext"))
        if key is None:
            raise ProviderError(f"{self.describe()}: Vault returned a malformed plaintext")
        return key


# From settings (`statecodec.config`, `statecodec kms`): the STATECODEC_VAULT_* table in docs/vault.md.
_VAULT_NAMES = {"ADDR", "TOKEN", "NAMESPACE", "CACERT", "CLIENT_CERT", "CLIENT_KEY", "SKIP_VERIFY"}


def _get(settings: Mapping[str, str], name: str) -> str | None:
    """``STATECODEC_VAULT_<name>``, else the standard ``VAULT_<name>`` where there is one, else None."""
    value = setting(settings, f"STATECODEC_VAULT_{name}", required=False)
    return setting(settings, f"VAULT_{name}", required=False) if value is None and name in _VAULT_NAMES else value


def _secret(settings: Mapping[str, str], name: str) -> str | None:
    """``STATECODEC_VAULT_<name>`` or the file ``..._FILE`` names (not both), else ``VAULT_<name>`` (a shell's)."""
    text, source = text_or_file(settings, f"STATECODEC_VAULT_{name}", _MAX_SECRET_FILE_BYTES, "hold one secret")
    if text is None:
        return _get(settings, name)
    if not text.strip():
        raise ConfigurationError(f"{source} is empty")
    return text.strip()


def vault_client_from_settings(settings: Mapping[str, str]) -> Any:
    """An authenticated client from ``STATECODEC_VAULT_*`` settings."""
    url = _get(settings, "ADDR")
    if url is None:
        raise ConfigurationError("STATECODEC_VAULT_ADDR (or VAULT_ADDR) is not set; e.g. https://vault.example:8200")
    role_id, secret_id = _get(settings, "ROLE_ID"), _secret(settings, "SECRET_ID")
    token = None if role_id or secret_id else _secret(settings, "TOKEN")
    skip = (_get(settings, "SKIP_VERIFY") or "false").lower()
    if skip not in {"true", "false", "1", "0"}:
        raise ConfigurationError("STATECODEC_VAULT_SKIP_VERIFY must be true or false")
    cert, cert_key = _get(settings, "CLIENT_CERT"), _get(settings, "CLIENT_KEY")
    if (cert is None) != (cert_key is None):
        raise ConfigurationError("set both STATECODEC_VAULT_CLIENT_CERT and STATECODEC_VAULT_CLIENT_KEY, or neither")
    timeout = _get(settings, "TIMEOUT")
    try:
        seconds = 1.0 if timeout is None else float(timeout)  # vault_client's default
    except ValueError:
        raise ConfigurationError("STATECODEC_VAULT_TIMEOUT must be seconds, e.g. 2") from None
    return vault_client(
        url,
        token=token,
        role_id=role_id,
        secret_id=secret_id,
        approle_mount_point=_get(settings, "APPROLE_MOUNT") or "approle",
        namespace=_get(settings, "NAMESPACE"),
        verify=False if skip in {"true", "1"} else _get(settings, "CACERT") or True,
        cert=(cert, cert_key) if cert is not None and cert_key is not None else None,
        timeout=seconds,
    )


@contextlib.contextmanager
def _client(settings: Mapping[str, str]) -> Iterator[tuple[Any, str, str]]:
    """(client, key, mount) from `settings`; the client is closed if the block fails."""
    key = _get(settings, "KEY")
    if key is None:
        raise ConfigurationError("STATECODEC_VAULT_KEY is not set; name the transit key, e.g. statecodec")
    client = vault_client_from_settings(settings)
    try:
        yield client, key, _get(settings, "MOUNT") or "transit"
    except BaseException:
        client.adapter.close()
        raise


def wrapper_from_settings(settings: Mapping[str, str]) -> VaultKeyWrapper:
    """A `VaultKeyWrapper` that owns its client; close it after use."""
    with _client(settings) as (client, key, mount):
        return VaultKeyWrapper(client, key, mount_point=mount, owns_client=True)


def envelope_codec_from_settings(settings: Mapping[str, str]) -> EnvelopeCodec:
    """``STATECODEC_CODEC=vault-envelope``: wrapped keys unwrapped once through Vault, then the pool is closed."""
    return build_envelope_codec(settings, wrapper_from_settings)


def transit_codec_from_settings(settings: Mapping[str, str]) -> VaultTransitCodec:
    """``STATECODEC_CODEC=vault-transit``: one Vault call per seal and per unseal."""
    context = context_setting(settings, "STATECODEC_VAULT_CONTEXT")
    cap = max_token_length_setting(settings)
    with _client(settings) as (client, key, mount):
        return VaultTransitCodec(
            client, key, mount_point=mount, context=context, max_token_length=cap, owns_client=True
        )
