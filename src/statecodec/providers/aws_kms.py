"""AWS KMS as the `KeyWrapper` of an `EnvelopeCodec` (``pip install 'statecodec[aws]'``).

Threat: a wrapped data key copied to another deployment, or replayed under another key, must not unwrap.
Every call sends the encryption context (KMS authenticates it), and `Decrypt` pins ``KeyId``, so KMS refuses
a blob made under any other key, even one the caller may use. Permissions and settings: ``docs/aws-kms.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from statecodec._settings import seconds, setting
from statecodec.errors import ConfigurationError, ProviderError, needs_extra
from statecodec.providers import RetryPolicy, _ClientHolder

with needs_extra("boto3", "aws"):
    import boto3
    from botocore import exceptions as bexc
    from botocore.config import Config

__all__ = ["AwsKmsWrapper"]

_KEY_VAR = "STATECODEC_AWS_KMS_KEY_ID"
_REGION_VAR = "STATECODEC_AWS_REGION"
_ENDPOINT_VAR = "STATECODEC_AWS_KMS_ENDPOINT"
_NETWORK = (bexc.ConnectionError, bexc.HTTPClientError)  # refused, reset, connect or read timeout
_TRANSIENT_CODES = {"ThrottlingException", "KMSInternalException", "DependencyTimeoutException"}
_CAUSES = {
    "AccessDeniedException": "access denied (the caller lacks the KMS permission on this key: check the key "
    "policy, IAM policy and encryption-context conditions)",
    "IncorrectKeyException": "wrong key (the wrapped key was made under another KMS key)",
    "InvalidCiphertextException": "the wrapped key does not decrypt under this encryption context "
    "(wrong context, or a corrupted wrapped key)",
    "NotFoundException": "key not found (check the key id, alias and region)",
    "DisabledException": "the key is disabled",
    "KMSInvalidStateException": "the key is not usable in its current state (pending deletion or import)",
}  # any other code is named as it is, with AWS's message (credentials rejected or expired, key usage...)


def _error(exc: BaseException) -> Mapping[str, Any]:
    return exc.response.get("Error", {}) if isinstance(exc, bexc.ClientError) else {}


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, bexc.ClientError):
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        return _error(exc).get("Code") in _TRANSIENT_CODES or (isinstance(status, int) and status >= 500)
    return isinstance(exc, _NETWORK)


class AwsKmsWrapper(_ClientHolder):
    """Wraps data keys under one AWS KMS symmetric key, with an encryption context. `key_id`: a key id, key ARN (it
    pins the key even if an alias is repointed), alias name or alias ARN. Pass a boto3 KMS `client`, or `region` /
    `endpoint_url` / `profile` to build one (timeouts; botocore's retries off)."""

    _SDK_LOGGERS = ("botocore", "boto3", "urllib3", "s3transfer")  # they log bodies, data keys included, at DEBUG
    _FAILURES = (bexc.ClientError, bexc.BotoCoreError)

    def __init__(
        self, key_id: str, *, client: Any = None, region: str | None = None, endpoint_url: str | None = None,
        profile: str | None = None, retry: RetryPolicy | None = None, connect_timeout: float = 5.0,
        read_timeout: float = 10.0,
    ) -> None:
        if not isinstance(key_id, str) or not key_id.strip() or len(key_id) > 2048:
            raise ConfigurationError(f"the AWS KMS key ({_KEY_VAR}, --key-id) must be a key id, key ARN or alias, "
                                     "e.g. arn:aws:kms:eu-west-1:111122223333:key/1234abcd-...")
        self._key_id = key_id.strip()
        super().__init__(retry, RetryPolicy())
        if client is None:
            if endpoint_url is not None and not str(endpoint_url).startswith(("https://", "http://")):
                raise ConfigurationError(f"the KMS endpoint ({_ENDPOINT_VAR}, --endpoint-url) must be http(s)://...")
            for name, value in (("connect_timeout", connect_timeout), ("read_timeout", read_timeout)):
                seconds(name, value, low=0, high=120, low_open=True)  # NaN fails here, not on the first KMS call
            retries = {"total_max_attempts": 1, "mode": "standard"}
            config = Config(retries=retries, connect_timeout=connect_timeout, read_timeout=read_timeout)
            try:
                session = boto3.session.Session(region_name=region, profile_name=profile)
                client = session.client("kms", endpoint_url=endpoint_url, config=config)
            except bexc.NoRegionError:
                raise ConfigurationError(f"no AWS region for KMS key {self._key_id}: set AWS_REGION (or "
                                         f"{_REGION_VAR}, --region)") from None
            except bexc.BotoCoreError as exc:
                raise ConfigurationError(f"cannot build an AWS KMS client: {type(exc).__name__}") from None
            self._close_owned = client.close
        self._client = client
        self._region = str(getattr(getattr(client, "meta", None), "region_name", "") or "")

    def describe(self) -> str:
        where = f" in {self._region}" if self._region and ":" not in self._key_id else ""
        return f"aws-kms key {self._key_id}{where}"

    def _call(self, operation: str, **params: Any) -> Mapping[str, Any]:
        method = getattr(self._client, operation)
        response: Mapping[str, Any] = self._call_provider(lambda: method(**params), operation, _transient)
        # KMS answers with the key ARN: confirm it is the configured key when that is an ARN or a bare id.
        answered, k = str(response.get("KeyId", "")), self._key_id
        if k.startswith("arn:") and ":key/" in k:
            ok = answered == k
        elif not k.startswith(("alias/", "arn:")):
            ok = answered.endswith(f":key/{k}") or answered == k
        else:
            ok = bool(answered)
        if not ok:
            raise ProviderError(f"{self.describe()}: KMS answered for another key")
        return response

    def _cause(self, exc: Exception, operation: str) -> str:
        attempts = self._retry.attempts
        code = str(_error(exc).get("Code", "")) or type(exc).__name__
        if isinstance(exc, (bexc.NoCredentialsError, bexc.PartialCredentialsError)):
            return "no usable AWS credentials (configure a role, profile or environment credentials)"
        if isinstance(exc, _NETWORK):
            return f"KMS unreachable after {attempts} attempts ({code})"
        if code == "ThrottlingException":
            return f"throttled by KMS after {attempts} attempts (raise the request quota or stagger start-up)"
        if _transient(exc):
            return f"KMS unavailable after {attempts} attempts ({code})"
        cause = _CAUSES.get(code, f"KMS refused the request ({code})")
        message = str(_error(exc).get("Message", ""))[:200]
        return f"{cause}: {message}" if message else cause

    def unwrap(self, blob: bytes, context: Mapping[str, str]) -> bytes:
        """`Decrypt` pinned to this key, with the encryption context."""
        params = {"KeyId": self._key_id, "EncryptionAlgorithm": "SYMMETRIC_DEFAULT", "EncryptionContext": dict(context)}
        plaintext: bytes = self._call("decrypt", CiphertextBlob=blob, **params).get("Plaintext", b"")
        return plaintext  # EnvelopeCodec checks its type and length

    def new_wrapped_key(self, context: Mapping[str, str]) -> bytes:
        """`GenerateDataKeyWithoutPlaintext`: KMS makes the key; no plaintext leaves KMS."""
        params = {"KeyId": self._key_id, "KeySpec": "AES_256", "EncryptionContext": dict(context)}
        blob: bytes = self._call("generate_data_key_without_plaintext", **params).get("CiphertextBlob", b"")
        return blob  # `envelope.new_wrapped_key` checks it


def wrapper_from_env(settings: Mapping[str, str]) -> AwsKmsWrapper:  # STATECODEC_CODEC=aws-kms
    key, region = setting(settings, _KEY_VAR) or "", setting(settings, _REGION_VAR, required=False)
    return AwsKmsWrapper(key, region=region, endpoint_url=setting(settings, _ENDPOINT_VAR, required=False))
