"""Google Cloud KMS for integration tests: a loopback gRPC server speaking the Cloud KMS API (it has no emulator).

``Encrypt`` and ``Decrypt`` of ``google.cloud.kms.v1.KeyManagementService`` for the real client over an insecure
channel: AES-256-GCM with the AAD bound, key versions, the CRC32C fields checked and filled as Cloud KMS does; on
demand a corrupted checksum or the next calls failed with a gRPC status.
"""

from __future__ import annotations

import os
import struct
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import google_crc32c
import grpc
import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from google.auth.credentials import AnonymousCredentials
from google.cloud import kms_v1
from google.cloud.kms_v1.services.key_management_service.transports import KeyManagementServiceGrpcTransport

_SERVICE = "google.cloud.kms.v1.KeyManagementService"
_DECRYPT_FAILED = "Decryption failed: verify that 'name' refers to the correct CryptoKey."
CORRUPTIONS = (
    "encrypt.verified_plaintext",  # verified_plaintext_crc32c comes back false
    "encrypt.verified_aad",  # verified_additional_authenticated_data_crc32c comes back false
    "encrypt.ciphertext_crc32c",  # ciphertext_crc32c does not match the ciphertext
    "encrypt.name",  # the response names a version of another key
    "decrypt.plaintext_crc32c",  # plaintext_crc32c does not match the plaintext
    "request",  # the server saw a request whose checksum did not match (INVALID_ARGUMENT)
)


def crc(data: bytes) -> int:
    return int(google_crc32c.value(data))


def key_name(project: str, ring: str, key: str) -> str:
    return f"projects/{project}/locations/global/keyRings/{ring}/cryptoKeys/{key}"


@dataclass
class _CryptoKey:
    versions: list[bytes] = field(default_factory=list)  # version n is versions[n - 1]
    primary: int = 1


class FakeCloudKms:
    """State and behaviour of the test Cloud KMS; `start()` / `stop()` the gRPC server at will."""

    def __init__(self) -> None:
        self.keys: dict[str, _CryptoKey] = {}
        self.calls: Counter[str] = Counter()
        self.requests: list[Any] = []  # every request received, in order
        self._faults: list[grpc.StatusCode] = []
        self._corrupt: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._server: grpc.Server | None = None
        self.port = 0

    # --- administration -------------------------------------------------
    def create_key(self) -> str:
        """A new key under a name this server has not used; returns the name."""
        with self._lock:
            name = key_name("statecodec-test", "ring", f"key-{len(self.keys)}")
            self.keys[name] = _CryptoKey(versions=[os.urandom(32)])
        return name

    def rotate(self, name: str) -> int:
        """Add a version and make it primary; returns its number."""
        with self._lock:
            key = self.keys[name]
            key.versions.append(os.urandom(32))
            key.primary = len(key.versions)
            return key.primary

    def fail_next(self, n: int, code: grpc.StatusCode) -> None:
        with self._lock:
            self._faults.extend([code] * n)

    def corrupt_next(self, mode: str, n: int = 1) -> None:
        assert mode in CORRUPTIONS, mode
        with self._lock:
            self._corrupt[mode] += n

    def reset(self) -> None:
        with self._lock:
            self._faults.clear()
            self._corrupt.clear()
            self.calls.clear()
            self.requests.clear()

    def _take_corruption(self, mode: str) -> bool:
        taken = self._corrupt[mode] > 0
        self._corrupt[mode] -= taken
        return taken

    # --- the API (`context.abort` raises: the call ends with that status) ----------------------
    def _enter(self, method: str, request: Any, context: grpc.ServicerContext) -> _CryptoKey:
        self.calls[method] += 1
        self.requests.append(request)
        if self._faults:
            code = self._faults.pop(0)
            context.abort(code, f"injected {code.name}")
        if request.name not in self.keys:
            context.abort(grpc.StatusCode.NOT_FOUND, f"CryptoKey {request.name} not found.")
        return self.keys[request.name]

    def _verified(self, request: Any, context: grpc.ServicerContext, data: str) -> list[bool]:
        """Whether the request carries the checksum of `data`, then of the AAD; INVALID_ARGUMENT if one is wrong (the
        first, on demand)."""
        corrupt, verified = self._take_corruption("request"), []
        for name in (data, "additional_authenticated_data"):
            checksum = getattr(request, f"{name}_crc32c")
            if checksum is not None and (corrupt or checksum != crc(bytes(getattr(request, name)))):
                message = f"The checksum in field {name}_crc32c did not match the data in field {name}."
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)
            verified.append(checksum is not None)
            corrupt = False
        return verified

    def encrypt(self, request: Any, context: grpc.ServicerContext) -> Any:
        with self._lock:
            key = self._enter("Encrypt", request, context)
            v_pt, v_aad = self._verified(request, context, "plaintext")
            plaintext, aad = bytes(request.plaintext), bytes(request.additional_authenticated_data)
            version = key.primary
            nonce = os.urandom(12)
            header = struct.pack(">I", version)
            ciphertext = header + nonce + AESGCM(key.versions[version - 1]).encrypt(nonce, plaintext, header + aad)
            checksum = crc(ciphertext)
            if self._take_corruption("encrypt.ciphertext_crc32c"):
                checksum ^= 1
            name = f"{request.name}/cryptoKeyVersions/{version}"
            if self._take_corruption("encrypt.name"):
                name = f"{request.name}-other/cryptoKeyVersions/1"
            verified_pt = v_pt and not self._take_corruption("encrypt.verified_plaintext")
            verified_aad = v_aad and not self._take_corruption("encrypt.verified_aad")
            return kms_v1.EncryptResponse(
                name=name, ciphertext=ciphertext, ciphertext_crc32c=checksum, verified_plaintext_crc32c=verified_pt,
                verified_additional_authenticated_data_crc32c=verified_aad,
            )

    def decrypt(self, request: Any, context: grpc.ServicerContext) -> Any:
        with self._lock:
            key = self._enter("Decrypt", request, context)
            self._verified(request, context, "ciphertext")
            ciphertext, aad = bytes(request.ciphertext), bytes(request.additional_authenticated_data)
            head = 4  # the version, then the nonce and AES-GCM under that version
            version = int.from_bytes(ciphertext[:head], "big")
            if len(ciphertext) < head + 12 + 16 or not 1 <= version <= len(key.versions):
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, _DECRYPT_FAILED)
            nonce, sealed = ciphertext[head : head + 12], ciphertext[head + 12 :]
            try:
                plaintext = AESGCM(key.versions[version - 1]).decrypt(nonce, sealed, ciphertext[:head] + aad)
            except InvalidTag:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, _DECRYPT_FAILED)
            checksum = crc(plaintext)
            if self._take_corruption("decrypt.plaintext_crc32c"):
                checksum ^= 1
            return kms_v1.DecryptResponse(plaintext=plaintext, plaintext_crc32c=checksum)

    # --- the gRPC server ----------------------------------------------------
    def start(self) -> None:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handlers = {
            name: grpc.unary_unary_rpc_method_handler(
                call, request_deserializer=request.deserialize, response_serializer=response.serialize
            )
            for name, call, request, response in (
                ("Encrypt", self.encrypt, kms_v1.EncryptRequest, kms_v1.EncryptResponse),
                ("Decrypt", self.decrypt, kms_v1.DecryptRequest, kms_v1.DecryptResponse),
            )
        }
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(_SERVICE, handlers),))
        self.port = server.add_insecure_port(f"127.0.0.1:{self.port}")
        if not self.port:
            raise RuntimeError("cannot bind the Cloud KMS test server")
        server.start()
        self._server = server

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None).wait()
            self._server = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def client(self) -> Any:
        """The real KeyManagementServiceClient over an insecure channel to this server."""
        channel, credentials = grpc.insecure_channel(self.address), AnonymousCredentials()  # type: ignore[no-untyped-call]
        transport = KeyManagementServiceGrpcTransport(channel=channel, credentials=credentials)
        return kms_v1.KeyManagementServiceClient(transport=transport)


@pytest.fixture(scope="session")
def _gcp_kms_session() -> Iterator[FakeCloudKms]:
    server = FakeCloudKms()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def gcp_kms(_gcp_kms_session: FakeCloudKms) -> FakeCloudKms:
    """The session Cloud KMS test server with no faults queued and counters at zero."""
    _gcp_kms_session.reset()
    return _gcp_kms_session


@pytest.fixture
def gcp_client(gcp_kms: FakeCloudKms) -> Iterator[Any]:
    client = gcp_kms.client()
    yield client
    client.transport.close()
