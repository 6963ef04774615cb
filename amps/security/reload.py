"""TLS certificates that can be replaced while the instance runs (issue 12): `kill -HUP` reads
every listener's and destination's files again.

Each holder validates the new files completely before anything changes, so a half-written or
mismatched pair leaves the certificates in use (a ConfigError says why). Connections already
open keep the certificate they were made with; new ones get the new one: gRPC listeners through
`dynamic_ssl_server_credentials` (asked before every handshake), the admin interface by loading
the new pair into its SSL context, replication destinations at their next connection.
"""

from __future__ import annotations

import ssl
import threading

import grpc

from amps.config.model import TlsConfig
from amps.security.tls import grpc_channel_credentials, read_pem, server_ssl_context


class ReloadableServerTls:
    """A gRPC listener's credentials whose certificate a `reload` replaces."""

    def __init__(self, tls: TlsConfig, config_path: str) -> None:
        self._tls = tls
        self._path = config_path
        self._lock = threading.Lock()  # the fetcher runs on gRPC's own threads
        self._pending: grpc.ServerCertificateConfiguration | None = None
        self._initial = self._load()

    def _load(self) -> grpc.ServerCertificateConfiguration:
        server_ssl_context(self._tls, self._path)  # a precise ConfigError for a bad pair or CA
        tls = self._tls
        ca = read_pem(f"{self._path}/CAFile", tls.ca_file) if tls.ca_file is not None else None
        return grpc.ssl_server_certificate_configuration(
            [
                (
                    read_pem(f"{self._path}/PrivateKey", tls.private_key),
                    read_pem(f"{self._path}/Certificate", tls.certificate),
                )
            ],
            root_certificates=ca,
        )

    def credentials(self) -> grpc.ServerCredentials:
        """Credentials for `add_secure_port`; they pick up each reload at the next handshake."""
        return grpc.dynamic_ssl_server_credentials(
            self._initial, self._fetch, require_client_authentication=self._tls.verify_client
        )

    def _fetch(self) -> grpc.ServerCertificateConfiguration | None:
        with self._lock:
            pending, self._pending = self._pending, None
        return pending

    def reload(self) -> None:
        """Read the files again; ConfigError (and no change) when they are not a usable pair."""
        configuration = self._load()
        with self._lock:
            self._pending = configuration


class ReloadableAdminTls:
    """The admin interface's SSL context; `reload` loads the new pair into it."""

    def __init__(self, tls: TlsConfig, config_path: str) -> None:
        self._tls = tls
        self._path = config_path
        self.context = server_ssl_context(tls, config_path)

    def reload(self) -> None:
        server_ssl_context(self._tls, self._path)  # validate fully before touching the live one
        try:
            self.context.load_cert_chain(self._tls.certificate, self._tls.private_key)
            if self._tls.ca_file is not None:
                self.context.load_verify_locations(cafile=self._tls.ca_file)
        except (OSError, ssl.SSLError) as error:  # replaced between the check and the load
            raise RuntimeError(f"admin certificate not reloaded: {error}") from None


class ReloadableChannelTls:
    """A destination's client credentials (its certificate and the CA), made again after a
    `reload` for the next connection."""

    def __init__(self, tls: TlsConfig) -> None:
        self._tls = tls
        self.credentials = self._load()

    def _load(self) -> grpc.ChannelCredentials:
        tls = self._tls
        return grpc_channel_credentials(tls.ca_file or "", tls.certificate, tls.private_key)

    def reload(self) -> None:
        server_ssl_context(self._tls, "Replication/Destination/Transport")  # a matching pair
        self.credentials = self._load()
