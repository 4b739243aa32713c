//! TLS for both of the master's channels — hosts and the HTTP API — with
//! rustls on the `ring` provider (no OpenSSL): configurations built from PEM
//! files, the channel binding that ties the handshake's HMAC proofs to one
//! TLS session, and the check that a host's client certificate names its
//! host id.
//!
//! The binding is an exporter value (RFC 5705, RFC 8446 §7.5) both ends of
//! one TLS session compute alike and nobody else can: a machine in the
//! middle that terminates the host's TLS and opens its own session to the
//! master holds two sessions with two different values, so a host proof it
//! relays does not verify at the master.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use tokio_rustls::{client, rustls, server, TlsAcceptor, TlsConnector};

/// The exporter label of the handshake's channel binding.
pub const BINDING_LABEL: &[u8] = b"EXPORTER-trainyard-handshake";
/// Bytes of channel binding mixed into each handshake proof.
pub const BINDING_LEN: usize = 32;

/// A TLS configuration that cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read the {what} in {path}: {reason}")]
    Read {
        what: &'static str,
        path: PathBuf,
        reason: String,
    },
    #[error("{path} holds no {what} (PEM expected)")]
    Empty { what: &'static str, path: PathBuf },
    #[error("the CA file {path} holds an unusable certificate: {reason}")]
    Ca { path: PathBuf, reason: String },
    #[error("invalid TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("invalid client-certificate verifier: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    #[error("{0:?} is not a name a certificate can carry (a DNS name or an IP address)")]
    ServerName(String),
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Every certificate in a PEM file, in order (a chain: leaf first).
pub fn load_certs(
    path: &Path,
    what: &'static str,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| TlsError::Read {
            what,
            path: path.into(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Empty {
            what,
            path: path.into(),
        });
    }
    Ok(certs)
}

/// The private key in a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsError::Read {
        what: "private key",
        path: path.into(),
        reason: e.to_string(),
    })
}

fn load_roots(path: &Path) -> Result<Arc<RootCertStore>, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs(path, "CA certificates")? {
        roots.add(cert).map_err(|e| TlsError::Ca {
            path: path.into(),
            reason: e.to_string(),
        })?;
    }
    Ok(Arc::new(roots))
}

/// What a TLS server presents, and whose client certificates it requires.
#[derive(Clone, Debug)]
pub struct ServerTls {
    /// The server's certificate chain (PEM, leaf first).
    pub cert: PathBuf,
    pub key: PathBuf,
    /// When set, clients must present a certificate signed by one of these
    /// CAs (mutual TLS); when unset, none is asked for.
    pub client_ca: Option<PathBuf>,
}

impl ServerTls {
    /// Reads the files and builds the acceptor: a bad file is an error now,
    /// not at the first connection.
    pub fn acceptor(&self) -> Result<TlsAcceptor, TlsError> {
        let builder = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?;
        let builder = match &self.client_ca {
            Some(ca) => builder.with_client_cert_verifier(
                rustls::server::WebPkiClientVerifier::builder_with_provider(
                    load_roots(ca)?,
                    provider(),
                )
                .build()?,
            ),
            None => builder.with_no_client_auth(),
        };
        let config = builder
            .with_single_cert(load_certs(&self.cert, "certificate")?, load_key(&self.key)?)?;
        Ok(TlsAcceptor::from(Arc::new(config)))
    }
}

/// How a client checks the server's certificate.
#[derive(Clone, Debug)]
pub enum ServerCheck {
    /// Signed by one of the CAs in this PEM file, for the name dialled.
    Ca(PathBuf),
    /// Any certificate at all: anyone on the path can pose as the server.
    /// For tests only; its users log it loudly.
    Insecure,
}

/// What a TLS client trusts and, for mutual TLS, presents.
#[derive(Clone, Debug)]
pub struct ClientTls {
    pub server: ServerCheck,
    /// The client's own certificate chain and key, for servers that ask.
    pub identity: Option<(PathBuf, PathBuf)>,
}

impl ClientTls {
    pub fn config(&self) -> Result<ClientConfig, TlsError> {
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?;
        let builder = match &self.server {
            ServerCheck::Ca(ca) => builder.with_root_certificates(load_roots(ca)?),
            ServerCheck::Insecure => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyServerCertificate(provider()))),
        };
        Ok(match &self.identity {
            Some((cert, key)) => {
                builder.with_client_auth_cert(load_certs(cert, "certificate")?, load_key(key)?)?
            }
            None => builder.with_no_client_auth(),
        })
    }

    pub fn connector(&self) -> Result<TlsConnector, TlsError> {
        Ok(TlsConnector::from(Arc::new(self.config()?)))
    }
}

/// The name to check the server's certificate against when dialling
/// `address` (`host:port`, `[v6]:port`, or a bare host).
pub fn server_name_of(address: &str) -> Result<ServerName<'static>, TlsError> {
    let host = match address.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) && !host.is_empty() => host,
        _ => address,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_string()).map_err(|_| TlsError::ServerName(host.into()))
}

/// The channel binding of an established TLS session (either side).
pub fn channel_binding<D>(
    connection: &rustls::ConnectionCommon<D>,
) -> Result<Vec<u8>, rustls::Error> {
    connection.export_keying_material(vec![0u8; BINDING_LEN], BINDING_LABEL, None)
}

/// Whether `cert` is valid for `name` by the rules a client uses for a
/// server (subject alternative names, DNS or IP): a host's certificate must
/// name its host id.
pub fn certificate_names(cert: &CertificateDer<'_>, name: &str) -> bool {
    let Ok(name) = ServerName::try_from(name) else {
        return false;
    };
    webpki::EndEntityCert::try_from(cert)
        .map(|cert| cert.verify_is_valid_for_subject_name(&name).is_ok())
        .unwrap_or(false)
}

/// Accepts every server certificate (signatures are still checked, so the
/// session is with whoever holds the presented key — just not a known one).
#[derive(Debug)]
struct AnyServerCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyServerCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_name_is_the_host_part_of_the_address() {
        let name = |a: &str| server_name_of(a).unwrap().to_str().into_owned();
        assert_eq!(name("master.internal:7700"), "master.internal");
        assert_eq!(name("127.0.0.1:7700"), "127.0.0.1");
        assert_eq!(name("[::1]:7700"), "::1");
        assert_eq!(name("master"), "master");
        assert!(server_name_of("bad name:7700").is_err());
    }
}
