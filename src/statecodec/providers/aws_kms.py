"""AWS KMS as the `KeyWrapper` of an `EnvelopeCodec` (``pip install 'statecodec[aws]'``).

Threat: a wrapped data key copied to another deployment, or replayed under
another key, must not unwrap. Every call sends the encryption context (AWS
KMS authenticates it as additional data: a different context fails), and
`Decrypt` pins ``KeyId`` so KMS refuses a blob made under any other key, even
one the caller may use. Failures become `ProviderError` naming the key and
the cause; throttling and transient errors are retried a bounded number of
times with jittered backoff.

Permissions: ``kms:Decrypt`` at start-up; ``kms:GenerateDataKeyWithoutPlaintext``
to provision data keys (``statecodec kms new-data-key``); ``kms:Encrypt`` only
for `wrap`. Scope each with a ``kms:EncryptionContext:purpose`` condition (see
``docs/aws-kms.md``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from statecodec.config import setting
from statecodec.envelope import EnvelopeCodec
from statecodec.errors import ConfigurationError, ProviderError
from statecodec.keys import MIN_KEY_LENGTH
from statecodec.providers import build_envelope_codec, missing_extra
from statecodec.providers._retry import RetryPolicy, call_with_retries, check_retry
from statecodec.providers._sdk_logs import sdk_logs_withheld

try:
    import boto3
    from botocore.config import Config
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        ConnectionClosedError,
        EndpointConnectionError,
        NoCredentialsError,
        NoRegionError,
        PartialCredentialsError,
        ReadTimeoutError,
    )
    from botocore.exceptions import ConnectionError as BotoConnectionError
except ImportError as _exc:  # pragma: no cover - exercised only without the extra
    raise missing_extra("boto3", "aws") from _exc

__all__ = [
    "AWS_ENDPOINT_VAR",
    "AWS_KEY_VAR",
    "AWS_REGION_VAR",
    "AwsKmsWrapper",
    "build_codec",
    "wrapper_from_settings",
]

AWS_KEY_VAR = "STATECODEC_AWS_KMS_KEY_ID"
AWS_REGION_VAR = "STATECODEC_AWS_REGION"
AWS_ENDPOINT_VAR = "STATECODEC_AWS_KMS_ENDPOINT"

_TRANSIENT_CODES = frozenset(
    {
        "ThrottlingException",
        "KMSInternalException",
        "DependencyTimeoutException",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "InternalFailure",
        "RequestTimeout",
        "RequestTimeoutException",
    }
)
_CAUSES = {
    "AccessDeniedException": "access denied (the caller lacks the KMS permission on this key: check the key "
    "policy, IAM policy and encryption-context conditions)",
    "IncorrectKeyException": "wrong key (the wrapped key was made under another KMS key)",
    "InvalidCiphertextException": "the wrapped key does not decrypt under this encryption context "
    "(wrong context, or a corrupted wrapped key)",
    "NotFoundException": "key not found (check the key id, alias and region)",
    "DisabledException": "the key is disabled",
    "KMSInvalidStateException": "the key is not usable in its current state (pending deletion or import)",
    "InvalidKeyUsageException": "the key is not a symmetric ENCRYPT_DECRYPT key",
    "UnrecognizedClientException": "credentials rejected (unknown access key)",
    "InvalidSignatureException": "credentials rejected (bad signature)",
    "ExpiredTokenException": "credentials expired",
    "ValidationException": "request refused as invalid",
}
_MAX_AWS_MESSAGE = 200
# The loggers boto3 and botocore log through: request and response bodies
# (data keys included) are logged at DEBUG, so they are withheld in every call.
_SDK_LOGGERS = ("botocore", "boto3", "urllib3", "s3transfer")


def _code(exc: BaseException) -> str:
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code", ""))
    return ""


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, (EndpointConnectionError, BotoConnectionError, ConnectionClosedError, ReadTimeoutError)):
        return True
    if isinstance(exc, ClientError):
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        return _code(exc) in _TRANSIENT_CODES or (isinstance(status, int) and status >= 500)
    return False


class AwsKmsWrapper:
    """Wraps data keys under one AWS KMS symmetric key, with an encryption context.

    `key_id` is a key id, key ARN, alias name (``alias/...``) or alias ARN;
    prefer the key ARN, which pins the key even if an alias is repointed.
    Pass a ready boto3 KMS `client`, or `region` / `endpoint_url` / `profile`
    to build one (with botocore's own retries off, so the bounded policy here
    is the only one, and with connect and read timeouts). A client built here
    is closed by `close()`; an injected client belongs to the caller.
    """

    name = "aws-kms"

    def __init__(
        self,
        key_id: str,
        *,
        client: Any = None,
        region: str | None = None,
        endpoint_url: str | None = None,
        profile: str | None = None,
        retry: RetryPolicy | None = None,
        connect_timeout: float = 5.0,
        read_timeout: float = 10.0,
    ) -> None:
        if not isinstance(key_id, str) or not key_id.strip() or len(key_id) > 2048:
            raise ConfigurationError(
                "key_id must be an AWS KMS key id, key ARN or alias (e.g. "
                "arn:aws:kms:eu-west-1:111122223333:key/1234abcd-...)"
            )
        self._key_id = key_id.strip()
        self._retry = check_retry(retry, RetryPolicy())
        self._owned = client is None
        if client is None:
            if endpoint_url is not None and not (
                isinstance(endpoint_url, str) and endpoint_url.startswith(("https://", "http://"))
            ):
                raise ConfigurationError("endpoint_url must be an http(s):// URL")
            for name, seconds in (("connect_timeout", connect_timeout), ("read_timeout", read_timeout)):
                # Positive check, so NaN fails here instead of on the first KMS call.
                if isinstance(seconds, bool) or not (isinstance(seconds, (int, float)) and 0 < seconds <= 120):
                    raise ConfigurationError(f"{name} must be a number of seconds in (0, 120]")
            config = Config(
                retries={"total_max_attempts": 1, "mode": "standard"},
                connect_timeout=connect_timeout,
                read_timeout=read_timeout,
            )
            try:
                session = boto3.session.Session(region_name=region, profile_name=profile)
                client = session.client("kms", endpoint_url=endpoint_url, config=config)
            except NoRegionError:
                raise ConfigurationError(
                    f"no AWS region for KMS key {self._key_id}: pass region= (or set AWS_REGION)"
                ) from None
            except BotoCoreError as exc:
                raise ConfigurationError(f"cannot build an AWS KMS client: {type(exc).__name__}") from None
        self._client = client
        self._region = str(getattr(getattr(client, "meta", None), "region_name", "") or "")

    @property
    def key_id(self) -> str:
        return self._key_id

    @property
    def client(self) -> Any:
        return self._client

    def describe(self) -> str:
        where = f" in {self._region}" if self._region and ":" not in self._key_id else ""
        return f"aws-kms key {self._key_id}{where}"

    def close(self) -> None:
        """Close the HTTP connections of a client built here (an injected client is left open)."""
        if self._owned:
            self._client.close()

    def __enter__(self) -> AwsKmsWrapper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"AwsKmsWrapper({self.describe()!r})"

    def _call(self, operation: str, **params: Any) -> dict[str, Any]:
        method = getattr(self._client, operation)
        try:
            with sdk_logs_withheld(_SDK_LOGGERS):
                response, _ = call_with_retries(lambda: method(**params), transient=_transient, policy=self._retry)
        except (ClientError, BotoCoreError) as exc:
            raise ProviderError(f"{self.describe()}: {self._cause(exc)}") from None
        if not isinstance(response, dict):
            raise ProviderError(f"{self.describe()}: {operation} returned no response")
        return response

    def _cause(self, exc: BaseException) -> str:
        attempts = self._retry.attempts
        if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
            return "no usable AWS credentials (configure a role, profile or environment credentials)"
        if isinstance(exc, (EndpointConnectionError, BotoConnectionError, ConnectionClosedError)):
            return f"KMS unreachable after {attempts} attempts ({type(exc).__name__})"
        if isinstance(exc, ReadTimeoutError):
            return f"KMS did not answer in time after {attempts} attempts"
        code = _code(exc)
        if code == "ThrottlingException":
            return f"throttled by KMS after {attempts} attempts (raise the request quota or stagger start-up)"
        if _transient(exc):
            return f"KMS unavailable after {attempts} attempts ({code or type(exc).__name__})"
        cause = _CAUSES.get(code, f"KMS refused the request ({code or type(exc).__name__})")
        message = ""
        if isinstance(exc, ClientError):
            message = str(exc.response.get("Error", {}).get("Message", ""))[:_MAX_AWS_MESSAGE]
        return f"{cause}: {message}" if message else cause

    def _check_key(self, response: Mapping[str, Any]) -> None:
        # KMS answers with the key ARN; when we were given an ARN or a bare key id,
        # confirm that the key which answered is the one configured.
        answered = str(response.get("KeyId", ""))
        k = self._key_id
        if k.startswith("arn:") and ":key/" in k:
            ok = answered == k
        elif not k.startswith(("alias/", "arn:")):
            ok = answered.endswith(f":key/{k}") or answered == k
        else:
            ok = bool(answered)
        if not ok:
            raise ProviderError(f"{self.describe()}: KMS answered for another key")

    def unwrap(self, blob: bytes, context: Mapping[str, str]) -> bytes:
        """`Decrypt` pinned to this key, with the encryption context."""
        response = self._call(
            "decrypt",
            CiphertextBlob=blob,
            EncryptionContext=dict(context),
            KeyId=self._key_id,
            EncryptionAlgorithm="SYMMETRIC_DEFAULT",
        )
        self._check_key(response)
        plaintext = response.get("Plaintext")
        if not isinstance(plaintext, bytes) or len(plaintext) < MIN_KEY_LENGTH:
            raise ProviderError(f"{self.describe()}: the wrapped value is not a {MIN_KEY_LENGTH}-byte data key")
        return plaintext

    def wrap(self, data_key: bytes, context: Mapping[str, str]) -> bytes:
        """`Encrypt` a caller-supplied data key under this key and context."""
        response = self._call("encrypt", KeyId=self._key_id, Plaintext=data_key, EncryptionContext=dict(context))
        self._check_key(response)
        return self._blob(response)

    def new_wrapped_key(self, context: Mapping[str, str]) -> bytes:
        """`GenerateDataKeyWithoutPlaintext`: KMS makes the key; no plaintext leaves KMS here."""
        response = self._call(
            "generate_data_key_without_plaintext",
            KeyId=self._key_id,
            KeySpec="AES_256",
            EncryptionContext=dict(context),
        )
        self._check_key(response)
        return self._blob(response)

    def _blob(self, response: Mapping[str, Any]) -> bytes:
        blob = response.get("CiphertextBlob")
        if not isinstance(blob, bytes) or not blob:
            raise ProviderError(f"{self.describe()}: KMS returned no ciphertext")
        return blob


def wrapper_from_settings(settings: Mapping[str, str], **kwargs: Any) -> AwsKmsWrapper:
    """An `AwsKmsWrapper` from ``STATECODEC_AWS_KMS_KEY_ID`` and optional region / endpoint."""
    key = setting(settings, AWS_KEY_VAR, required=False)
    if key is None:
        raise ConfigurationError(
            f"{AWS_KEY_VAR} is not set; set it to the ARN of the KMS key that wraps the data keys"
        )
    region = setting(settings, AWS_REGION_VAR, required=False)
    endpoint = setting(settings, AWS_ENDPOINT_VAR, required=False)
    return AwsKmsWrapper(key, region=region, endpoint_url=endpoint, **kwargs)


def build_codec(settings: Mapping[str, str]) -> EnvelopeCodec:
    """Builder for ``STATECODEC_CODEC=aws-kms``: unwrap the ring once, then close the KMS client."""
    return build_envelope_codec(settings, wrapper_from_settings)
