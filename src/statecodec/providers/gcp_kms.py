"""Google Cloud KMS as the `KeyWrapper` of an `EnvelopeCodec` (``pip install 'statecodec[gcp]'``).

Threat: a wrapped data key replayed under another use, or bytes altered on the
way to or from KMS, must never yield a data key. Every call binds the context
as additional authenticated data (canonical JSON, see
`statecodec.envelope.canonical_context`), so a blob made for one context does
not decrypt under another. Every request carries CRC32C checksums of its
inputs and every response is checked as Google documents for this API:
``verified_plaintext_crc32c`` and ``verified_additional_authenticated_data_crc32c``
must be true, ``ciphertext_crc32c`` / ``plaintext_crc32c`` must match the
returned bytes, and ``name`` must be a version of the configured key. A
checksum mismatch is retried a bounded number of times, like throttling and
transient errors, then fails as `ProviderError` naming the key and the cause.

Cloud KMS has no data-key API: `new_wrapped_key` draws 32 bytes from the OS
CSPRNG and encrypts them; the plaintext is dropped before returning.

Permissions: ``roles/cloudkms.cryptoKeyDecrypter`` on the key at start-up;
``roles/cloudkms.cryptoKeyEncrypter`` to provision data keys (see
``docs/gcp-kms.md``).
"""

from __future__ import annotations

import ipaddress
import re
import secrets
from collections.abc import Callable, Mapping
from typing import Any

from statecodec.config import setting
from statecodec.envelope import EnvelopeCodec, canonical_context
from statecodec.errors import ConfigurationError, ProviderError
from statecodec.keys import MIN_KEY_LENGTH
from statecodec.providers import build_envelope_codec, missing_extra
from statecodec.providers._retry import RetryPolicy, call_with_retries, check_retry
from statecodec.providers._sdk_logs import sdk_logs_withheld

try:
    import google_crc32c
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_exc
    from google.cloud import kms_v1
except ImportError as _exc:  # pragma: no cover - exercised only without the extra
    raise missing_extra("google-cloud-kms", "gcp") from _exc

__all__ = [
    "GCP_EMULATOR_VAR",
    "GCP_KEY_VAR",
    "GcpKmsWrapper",
    "build_codec",
    "wrapper_from_settings",
]

GCP_KEY_VAR = "STATECODEC_GCP_KMS_KEY"
GCP_EMULATOR_VAR = "STATECODEC_GCP_KMS_EMULATOR_HOST"

_KEY_NAME = re.compile(r"projects/[^/]+/locations/[^/]+/keyRings/[^/]+/cryptoKeys/[^/]+")
_TRANSIENT = (
    gexc.ServiceUnavailable,
    gexc.DeadlineExceeded,
    gexc.InternalServerError,
    gexc.ResourceExhausted,
    gexc.Aborted,
    gexc.RetryError,
)
_MAX_GCP_MESSAGE = 200
# The loggers the Cloud KMS client logs through: its gRPC transport logs request
# and response payloads (data keys included) at DEBUG, so they are withheld in every call.
_SDK_LOGGERS = ("google", "grpc")


class _Corrupted(Exception):
    """A checksum did not match: data changed in transit, so the call is retried."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


def crc32c(data: bytes) -> int:
    """CRC32C of `data` as the unsigned int Cloud KMS carries in its ``*_crc32c`` fields."""
    return int(google_crc32c.value(data))


def _checksum_refused(exc: BaseException) -> bool:
    # Cloud KMS answers INVALID_ARGUMENT when a request checksum does not match the
    # bytes it received; Google's guidance is a limited number of retries.
    return isinstance(exc, gexc.InvalidArgument) and "checksum" in str(getattr(exc, "message", "")).lower()


def _transient(exc: BaseException) -> bool:
    return isinstance(exc, (*_TRANSIENT, _Corrupted)) or _checksum_refused(exc)


class GcpKmsWrapper:
    """Wraps data keys under one Cloud KMS symmetric crypto key, with bound AAD.

    `key_name` is the crypto key resource name,
    ``projects/P/locations/L/keyRings/R/cryptoKeys/K`` (not a version: new
    data keys use the primary version and old blobs keep decrypting after a
    rotation). Pass a ready `client` (``kms_v1.KeyManagementServiceClient``),
    or let one be built with Application Default Credentials. `emulator_host`
    (``127.0.0.1:PORT``, loopback only) talks plaintext gRPC to a local test
    server. A client built here is closed by `close()`.
    """

    name = "gcp-kms"

    def __init__(
        self,
        key_name: str,
        *,
        client: Any = None,
        emulator_host: str | None = None,
        retry: RetryPolicy | None = None,
        timeout: float = 10.0,
    ) -> None:
        if not isinstance(key_name, str) or not _KEY_NAME.fullmatch(key_name.strip()):
            raise ConfigurationError(
                "key_name must be a Cloud KMS crypto key name: "
                "projects/PROJECT/locations/LOCATION/keyRings/RING/cryptoKeys/KEY"
            )
        if isinstance(timeout, bool) or not (isinstance(timeout, (int, float)) and 0 < timeout <= 120):
            raise ConfigurationError("timeout must be a number of seconds in (0, 120]")
        self._key = key_name.strip()
        self._retry = check_retry(retry, RetryPolicy())
        self._timeout = float(timeout)
        self._owned = client is None
        if client is None:
            client = _emulator_client(emulator_host) if emulator_host is not None else _default_client()
        self._client = client

    @property
    def key_name(self) -> str:
        return self._key

    @property
    def client(self) -> Any:
        return self._client

    def describe(self) -> str:
        return f"gcp-kms key {self._key}"

    def close(self) -> None:
        """Close the channel of a client built here (an injected client is left open)."""
        if self._owned:
            self._client.transport.close()

    def __enter__(self) -> GcpKmsWrapper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"GcpKmsWrapper({self.describe()!r})"

    def _call(self, attempt: Callable[[], bytes], operation: str) -> bytes:
        try:
            with sdk_logs_withheld(_SDK_LOGGERS):
                result, _ = call_with_retries(attempt, transient=_transient, policy=self._retry)
        except _Corrupted as exc:
            raise ProviderError(
                f"{self.describe()}: {exc.what} after {self._retry.attempts} attempts (data corrupted in transit)"
            ) from None
        except gexc.GoogleAPICallError as exc:
            raise ProviderError(f"{self.describe()}: {self._cause(exc, operation)}") from None
        except auth_exc.GoogleAuthError as exc:
            raise ProviderError(f"{self.describe()}: no usable Google credentials ({type(exc).__name__})") from None
        return result

    def _cause(self, exc: gexc.GoogleAPICallError, operation: str) -> str:
        attempts = self._retry.attempts
        message = str(getattr(exc, "message", "") or "")[:_MAX_GCP_MESSAGE]
        if isinstance(exc, gexc.ResourceExhausted):
            return f"throttled by Cloud KMS after {attempts} attempts (quota exhausted)"
        if isinstance(exc, (gexc.ServiceUnavailable, gexc.DeadlineExceeded)):
            return f"Cloud KMS unreachable after {attempts} attempts ({type(exc).__name__})"
        if isinstance(exc, _TRANSIENT):
            return f"Cloud KMS unavailable after {attempts} attempts ({type(exc).__name__})"
        if _checksum_refused(exc):
            return f"Cloud KMS refused the request checksum after {attempts} attempts (data corrupted in transit)"
        if isinstance(exc, gexc.PermissionDenied):
            return (
                "access denied (grant roles/cloudkms.cryptoKeyDecrypter on this key for start-up, "
                f"cryptoKeyEncrypter for provisioning): {message}"
            )
        if isinstance(exc, gexc.Unauthenticated):
            return f"credentials rejected: {message}"
        if isinstance(exc, gexc.NotFound):
            return f"key not found (check project, location, key ring and key names): {message}"
        if isinstance(exc, gexc.FailedPrecondition):
            return f"the key version is not enabled (disabled, destroyed or pending): {message}"
        if isinstance(exc, gexc.InvalidArgument) and operation == "decrypt":
            return (
                "the wrapped key does not decrypt under this key and context (made under another key, "
                f"with another context, or corrupted): {message}"
            )
        return f"Cloud KMS refused the request ({type(exc).__name__}): {message}"

    def _request(self, context: Mapping[str, str], **fields: object) -> dict[str, object]:
        """A request to this key with `fields` and the context bound as AAD, with its checksum."""
        aad = canonical_context(context)
        return {
            "name": self._key,
            **fields,
            "additional_authenticated_data": aad,
            "additional_authenticated_data_crc32c": crc32c(aad),
        }

    def unwrap(self, blob: bytes, context: Mapping[str, str]) -> bytes:
        """`Decrypt` with the context as AAD; request and response checksums verified."""
        request = self._request(context, ciphertext=blob, ciphertext_crc32c=crc32c(blob))

        def attempt() -> bytes:
            response = self._client.decrypt(request=request, retry=None, timeout=self._timeout)
            plaintext = bytes(response.plaintext)
            if response.plaintext_crc32c is None or response.plaintext_crc32c != crc32c(plaintext):
                raise _Corrupted("decrypt response failed its plaintext_crc32c check")
            return plaintext

        plaintext = self._call(attempt, "decrypt")
        if len(plaintext) < MIN_KEY_LENGTH:
            raise ProviderError(f"{self.describe()}: the wrapped value is not a {MIN_KEY_LENGTH}-byte data key")
        return plaintext

    def wrap(self, data_key: bytes, context: Mapping[str, str]) -> bytes:
        """`Encrypt` `data_key` under the primary version with the context as AAD; all checksums verified."""
        request = self._request(context, plaintext=data_key, plaintext_crc32c=crc32c(data_key))
        prefix = self._key + "/cryptoKeyVersions/"

        def attempt() -> bytes:
            response = self._client.encrypt(request=request, retry=None, timeout=self._timeout)
            if not response.verified_plaintext_crc32c:
                raise _Corrupted("Cloud KMS did not verify plaintext_crc32c of the encrypt request")
            if not response.verified_additional_authenticated_data_crc32c:
                raise _Corrupted("Cloud KMS did not verify additional_authenticated_data_crc32c")
            ciphertext = bytes(response.ciphertext)
            if response.ciphertext_crc32c is None or response.ciphertext_crc32c != crc32c(ciphertext):
                raise _Corrupted("encrypt response failed its ciphertext_crc32c check")
            if not str(response.name).startswith(prefix):
                raise ProviderError(f"{self.describe()}: Cloud KMS answered with another key")
            return ciphertext

        ciphertext = self._call(attempt, "encrypt")
        if not ciphertext:
            raise ProviderError(f"{self.describe()}: Cloud KMS returned no ciphertext")
        return ciphertext

    def new_wrapped_key(self, context: Mapping[str, str]) -> bytes:
        """A fresh 32-byte data key from the OS CSPRNG, returned only wrapped."""
        return self.wrap(secrets.token_bytes(MIN_KEY_LENGTH), context)


def _default_client() -> Any:
    try:
        return kms_v1.KeyManagementServiceClient()
    except auth_exc.GoogleAuthError as exc:
        raise ConfigurationError(
            "no Google credentials for Cloud KMS: run on a service account, set "
            f"GOOGLE_APPLICATION_CREDENTIALS, or pass client= ({type(exc).__name__})"
        ) from None


def _emulator_client(host: str) -> Any:
    hostname, sep, port = host.rpartition(":")
    hostname = hostname.strip("[]")
    try:
        loopback = hostname == "localhost" or ipaddress.ip_address(hostname).is_loopback
    except ValueError:
        loopback = False
    if not sep or not port.isdecimal() or not loopback:
        raise ConfigurationError(
            "emulator_host must be a loopback HOST:PORT such as 127.0.0.1:9010; plaintext gRPC is only "
            "for a local test server"
        )
    import grpc
    from google.auth.credentials import AnonymousCredentials
    from google.cloud.kms_v1.services.key_management_service.transports import (
        KeyManagementServiceGrpcTransport,
    )

    channel = grpc.insecure_channel(host)
    credentials = AnonymousCredentials()  # type: ignore[no-untyped-call]
    transport = KeyManagementServiceGrpcTransport(channel=channel, credentials=credentials)
    return kms_v1.KeyManagementServiceClient(transport=transport)


def wrapper_from_settings(settings: Mapping[str, str], **kwargs: Any) -> GcpKmsWrapper:
    """A `GcpKmsWrapper` from ``STATECODEC_GCP_KMS_KEY`` (and the emulator host, for tests)."""
    key = setting(settings, GCP_KEY_VAR, required=False)
    if key is None:
        raise ConfigurationError(
            f"{GCP_KEY_VAR} is not set; set it to projects/P/locations/L/keyRings/R/cryptoKeys/K"
        )
    emulator = setting(settings, GCP_EMULATOR_VAR, required=False)
    return GcpKmsWrapper(key, emulator_host=emulator, **kwargs)


def build_codec(settings: Mapping[str, str]) -> EnvelopeCodec:
    """Builder for ``STATECODEC_CODEC=gcp-kms``: unwrap the ring once, then close the channel."""
    return build_envelope_codec(settings, wrapper_from_settings)
