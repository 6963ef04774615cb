"""TLS for the client transport, the admin HTTP interface and the clients (issue 12).

Only the standard library's `ssl` and gRPC's credentials: no cryptography is written here. Every
listener and client refuses TLS versions below 1.2 (gRPC's own floor is TLS 1.2 as well).
"""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import grpc

from amps import errors
from amps.config.model import TlsConfig

StrPath = str | os.PathLike[str]


def read_pem(config_path: str, file: StrPath) -> bytes:
    """The bytes of a PEM file; ConfigError naming the element when it cannot be read."""
    try:
        return Path(file).read_bytes()
    except OSError as error:
        raise errors.ConfigError(
            config_path, str(file), f"a readable PEM file ({error.strerror})"
        ) from None


def server_ssl_context(tls: TlsConfig, config_path: str) -> ssl.SSLContext:
    """A server context for the admin HTTP interface; ConfigError names a bad file."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(tls.certificate, tls.private_key)
    except (OSError, ssl.SSLError) as error:
        raise errors.ConfigError(
            f"{config_path}/Certificate",
            tls.certificate,
            f"a PEM certificate matching PrivateKey {tls.private_key} ({error})",
        ) from None
    if tls.ca_file is not None:
        try:
            context.load_verify_locations(cafile=tls.ca_file)
        except (OSError, ssl.SSLError) as error:
            raise errors.ConfigError(
                f"{config_path}/CAFile", tls.ca_file, f"a PEM CA file ({error})"
            ) from None
    context.verify_mode = ssl.CERT_REQUIRED if tls.verify_client else ssl.CERT_NONE
    return context


def grpc_channel_credentials(
    ca_file: StrPath, cert_file: StrPath | None = None, key_file: StrPath | None = None
) -> grpc.ChannelCredentials:
    """Client credentials: trust `ca_file`; present `cert_file`/`key_file` when both given."""
    if (cert_file is None) != (key_file is None):
        raise ValueError("a client certificate needs both tls_cert and tls_key")
    return grpc.ssl_channel_credentials(
        root_certificates=read_pem("--tls-ca", ca_file),
        private_key=read_pem("--tls-key", key_file) if key_file is not None else None,
        certificate_chain=read_pem("--tls-cert", cert_file) if cert_file is not None else None,
    )


def client_ssl_context(
    ca_file: StrPath, cert_file: StrPath | None = None, key_file: StrPath | None = None
) -> ssl.SSLContext:
    """A client context for the admin interface (https): TLS 1.2 at least, hostname checked."""
    context = ssl.create_default_context(cafile=os.fspath(ca_file))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert_file is not None:
        context.load_cert_chain(cert_file, key_file)
    return context
