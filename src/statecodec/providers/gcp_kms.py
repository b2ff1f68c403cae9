"""Google Cloud KMS as the `KeyWrapper` of an `EnvelopeCodec` (``pip install 'statecodec[gcp]'``).

Threat: a wrapped data key replayed under another use, or bytes altered on the way to or from KMS, must never
yield a data key: the context is bound as AAD, and CRC32C checksums are sent and checked (a mismatch is retried,
then a `ProviderError`). Roles and settings: ``docs/gcp-kms.md``.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from typing import Any

from statecodec._settings import seconds, setting
from statecodec.envelope import canonical_context
from statecodec.errors import ConfigurationError, ProviderError, needs_extra
from statecodec.keys import MIN_KEY_LENGTH
from statecodec.providers import RetryPolicy, _ClientHolder

with needs_extra("google-cloud-kms", "gcp"):
    import google_crc32c
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_exc
    from google.cloud import kms_v1

__all__ = ["GcpKmsWrapper"]

_KEY_VAR = "STATECODEC_GCP_KMS_KEY"
_EMULATOR_VAR = "STATECODEC_GCP_KMS_EMULATOR_HOST"
_KEY_NAME = re.compile(r"projects/[^/]+/locations/[^/]+/keyRings/[^/]+/cryptoKeys/[^/]+")
_UNREACHABLE = (gexc.ServiceUnavailable, gexc.DeadlineExceeded)
_TRANSIENT = (*_UNREACHABLE, gexc.InternalServerError, gexc.ResourceExhausted, gexc.Aborted)
_CAUSES = (
    (gexc.PermissionDenied, "access denied (grant roles/cloudkms.cryptoKeyDecrypter on this key for start-up, "
     "cryptoKeyEncrypter for provisioning)"),
    (gexc.Unauthenticated, "credentials rejected"),
    (gexc.NotFound, "key not found (check project, location, key ring and key names)"),
    (gexc.FailedPrecondition, "the key version is not enabled (disabled, destroyed or pending)"),
    (gexc.InvalidArgument, "the wrapped key does not decrypt under this key and context (made under another "
     "key, with another context, or corrupted)"),
)


class _Corrupted(Exception):
    """A checksum did not match: data changed in transit, so the call is retried."""


def _crc32c(data: bytes) -> int:
    return int(google_crc32c.value(data))


def _checksum_refused(exc: BaseException) -> bool:
    # Cloud KMS answers INVALID_ARGUMENT when a request checksum does not match what it received.
    return isinstance(exc, gexc.InvalidArgument) and "checksum" in str(exc.message).lower()


def _transient(exc: BaseException) -> bool:
    return isinstance(exc, (*_TRANSIENT, _Corrupted)) or _checksum_refused(exc)


class GcpKmsWrapper(_ClientHolder):
    """Wraps data keys under one Cloud KMS symmetric crypto key, with the context bound as AAD. `key_name`:
    ``projects/P/locations/L/keyRings/R/cryptoKeys/K`` (not a version, so old blobs keep decrypting after a rotation).
    Pass a `client`, or let one be built with Application Default Credentials (`emulator_host`: plaintext gRPC to a
    loopback test server)."""

    _SDK_LOGGERS = ("google", "grpc")  # its gRPC transport logs request and response payloads (data keys) at DEBUG
    _FAILURES = (_Corrupted, gexc.GoogleAPICallError, auth_exc.GoogleAuthError)

    def __init__(
        self, key_name: str, *, client: Any = None, emulator_host: str | None = None, retry: RetryPolicy | None = None,
        timeout: float = 10.0,
    ) -> None:
        if not isinstance(key_name, str) or not _KEY_NAME.fullmatch(key_name.strip()):
            raise ConfigurationError(f"the Cloud KMS key ({_KEY_VAR}, --key) must be a crypto key name: "
                                     "projects/PROJECT/locations/LOCATION/keyRings/RING/cryptoKeys/KEY")
        self._timeout = float(seconds("timeout", timeout, low=0, high=120, low_open=True))
        self._key = key_name.strip()
        super().__init__(retry, RetryPolicy())
        if client is None:
            client = _emulator_client(emulator_host) if emulator_host is not None else _default_client()
            self._close_owned = client.transport.close
        self._client = client

    def describe(self) -> str:
        return f"gcp-kms key {self._key}"

    def _cause(self, exc: Exception, operation: str) -> str:
        attempts = self._retry.attempts
        if isinstance(exc, _Corrupted):
            return f"{exc} after {attempts} attempts (data corrupted in transit)"
        if not isinstance(exc, gexc.GoogleAPICallError):  # a GoogleAuthError
            return f"no usable Google credentials ({type(exc).__name__})"
        if isinstance(exc, gexc.ResourceExhausted):
            return f"throttled by Cloud KMS after {attempts} attempts (quota exhausted)"
        if _checksum_refused(exc):
            return f"Cloud KMS refused the request checksum after {attempts} attempts (data corrupted in transit)"
        if isinstance(exc, _TRANSIENT):
            state = "unreachable" if isinstance(exc, _UNREACHABLE) else "unavailable"
            return f"Cloud KMS {state} after {attempts} attempts ({type(exc).__name__})"
        cause = next((text for kind, text in _CAUSES if isinstance(exc, kind)), "")
        if not cause or (isinstance(exc, gexc.InvalidArgument) and operation != "decrypt"):
            cause = f"Cloud KMS refused the request ({type(exc).__name__})"
        return f"{cause}: {str(exc.message or '')[:200]}"

    def _request(self, context: Mapping[str, str], **fields: object) -> dict[str, object]:
        aad = canonical_context(context)
        bound = {"additional_authenticated_data": aad, "additional_authenticated_data_crc32c": _crc32c(aad)}
        return {"name": self._key, **fields, **bound}

    def unwrap(self, blob: bytes, context: Mapping[str, str]) -> bytes:
        """`Decrypt` with the context as AAD; request and response checksums verified."""
        request = self._request(context, ciphertext=blob, ciphertext_crc32c=_crc32c(blob))

        def attempt() -> bytes:
            response = self._client.decrypt(request=request, retry=None, timeout=self._timeout)
            plaintext = bytes(response.plaintext)
            if response.plaintext_crc32c is None or response.plaintext_crc32c != _crc32c(plaintext):
                raise _Corrupted("decrypt response failed its plaintext_crc32c check")
            return plaintext

        return self._call_provider(attempt, "decrypt", _transient)

    def new_wrapped_key(self, context: Mapping[str, str]) -> bytes:
        """`Encrypt` a fresh 32-byte key from the OS CSPRNG under the primary version; all checksums verified."""
        data_key = secrets.token_bytes(MIN_KEY_LENGTH)
        request = self._request(context, plaintext=data_key, plaintext_crc32c=_crc32c(data_key))

        def attempt() -> bytes:
            response = self._client.encrypt(request=request, retry=None, timeout=self._timeout)
            if not response.verified_plaintext_crc32c:
                raise _Corrupted("Cloud KMS did not verify plaintext_crc32c of the encrypt request")
            if not response.verified_additional_authenticated_data_crc32c:
                raise _Corrupted("Cloud KMS did not verify additional_authenticated_data_crc32c")
            ciphertext = bytes(response.ciphertext)
            if response.ciphertext_crc32c is None or response.ciphertext_crc32c != _crc32c(ciphertext):
                raise _Corrupted("encrypt response failed its ciphertext_crc32c check")
            if not str(response.name).startswith(f"{self._key}/cryptoKeyVersions/"):
                raise ProviderError(f"{self.describe()}: Cloud KMS answered with another key")
            return ciphertext

        return self._call_provider(attempt, "encrypt", _transient)


def _default_client() -> Any:
    try:
        return kms_v1.KeyManagementServiceClient()
    except auth_exc.GoogleAuthError as exc:
        raise ConfigurationError(f"no Google credentials for Cloud KMS: run on a service account or set "
                                 f"GOOGLE_APPLICATION_CREDENTIALS (in Python, GcpKmsWrapper(client=...) takes a client "
                                 f"you built) ({type(exc).__name__})") from None


def _emulator_client(host: str) -> Any:
    hostname, _, port = host.rpartition(":")
    if hostname not in ("127.0.0.1", "localhost", "[::1]") or not port.isdecimal():
        raise ConfigurationError(f"the Cloud KMS test server ({_EMULATOR_VAR}, --emulator-host) must be on loopback: "
                                 "127.0.0.1:PORT, localhost:PORT or [::1]:PORT (plaintext gRPC is only for a local "
                                 "test server)")
    import grpc
    from google.auth.credentials import AnonymousCredentials
    from google.cloud.kms_v1.services.key_management_service.transports import KeyManagementServiceGrpcTransport

    credentials = AnonymousCredentials()  # type: ignore[no-untyped-call]
    transport = KeyManagementServiceGrpcTransport(channel=grpc.insecure_channel(host), credentials=credentials)
    return kms_v1.KeyManagementServiceClient(transport=transport)


def wrapper_from_env(settings: Mapping[str, str]) -> GcpKmsWrapper:  # STATECODEC_CODEC=gcp-kms
    key = setting(settings, _KEY_VAR) or ""
    return GcpKmsWrapper(key, emulator_host=setting(settings, _EMULATOR_VAR, required=False))
