//! The master's side of the handshake: send a challenge, check the host's
//! hello (protocol, identity, proof of the cluster secret bound to the TLS
//! session, the name on its certificate, sane numbers), and answer with the
//! master's own proof. `check_hello` and `check_certificate` are the pure
//! part.

use trainyard_proto::auth::ClusterSecret;
use trainyard_proto::messages::{AdapterInfo, Hello};
use trainyard_proto::tls::certificate_names;
use trainyard_proto::tls::rustls::pki_types::CertificateDer;
use trainyard_proto::{HostId, PROTOCOL_VERSION};

/// Most slots one host may declare.
pub const MAX_SLOTS: u32 = 4096;
/// Most adapters one host may declare.
pub const MAX_ADAPTERS: usize = 256;

/// Why a hello was refused. The text is sent to the host and logged.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HandshakeRefusal {
    #[error(
        "protocol version {got} is not supported; this master speaks version {PROTOCOL_VERSION}"
    )]
    Protocol { got: u32 },
    #[error("authentication failed: the host does not know the cluster secret, or its proof was made for another TLS session (relayed)")]
    BadProof,
    #[error("the host's TLS certificate does not name its host id {host}")]
    CertificateName { host: String },
    #[error("the host presented no TLS certificate")]
    NoCertificate,
    #[error("invalid hello: {0}")]
    Invalid(String),
    /// Another live connection holds the host's id.
    #[error("{0}")]
    Duplicate(String),
}

/// Checks a host's hello against the challenge this connection sent and
/// the connection's channel binding (empty on plain TCP).
pub fn check_hello(
    hello: &Hello,
    master_nonce: &[u8],
    secret: &ClusterSecret,
    channel: &[u8],
) -> Result<(), HandshakeRefusal> {
    if hello.protocol != PROTOCOL_VERSION {
        return Err(HandshakeRefusal::Protocol {
            got: hello.protocol,
        });
    }
    if !secret.verify_host(
        master_nonce,
        &hello.nonce,
        hello.host_id.as_str(),
        channel,
        &hello.proof,
    ) {
        return Err(HandshakeRefusal::BadProof);
    }
    if hello.nonce.len() != trainyard_proto::auth::NONCE_LEN {
        return Err(HandshakeRefusal::Invalid(
            "nonce has the wrong length".into(),
        ));
    }
    if hello.slots == 0 || hello.slots > MAX_SLOTS {
        return Err(HandshakeRefusal::Invalid(format!(
            "slots must be between 1 and {MAX_SLOTS}, got {}",
            hello.slots
        )));
    }
    if let Err(e) = hello.capacity.validate() {
        return Err(HandshakeRefusal::Invalid(format!("invalid capacity: {e}")));
    }
    if hello.running.len() > hello.slots as usize {
        return Err(HandshakeRefusal::Invalid(format!(
            "{} running attempts on {} slots",
            hello.running.len(),
            hello.slots
        )));
    }
    check_adapters(&hello.adapters).map_err(HandshakeRefusal::Invalid)
}

/// Checks the adapters a host says it carries (in its hello, or when it
/// reloads them).
pub fn check_adapters(adapters: &[AdapterInfo]) -> Result<(), String> {
    if adapters.len() > MAX_ADAPTERS {
        return Err(format!(
            "at most {MAX_ADAPTERS} adapters, got {}",
            adapters.len()
        ));
    }
    for a in adapters {
        let valid = !a.name.is_empty()
            && a.name.len() <= 64
            && a.name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && a.kinds.len() <= 32
            && a.kinds.iter().all(|k| !k.is_empty() && k.len() <= 64);
        if !valid {
            return Err(format!("adapter {:?} has an invalid name or kinds", a.name));
        }
    }
    Ok(())
}

/// With mutual TLS, the host's certificate (already checked against the CA
/// by the TLS layer) must name the id the host claims: a valid certificate
/// of one host does not let it pose as another.
pub fn check_certificate(
    certificate: Option<&CertificateDer<'_>>,
    host: &HostId,
) -> Result<(), HandshakeRefusal> {
    match certificate {
        None => Err(HandshakeRefusal::NoCertificate),
        Some(cert) if certificate_names(cert, host.as_str()) => Ok(()),
        Some(_) => Err(HandshakeRefusal::CertificateName {
            host: host.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trainyard_proto::auth::nonce;

    const CHANNEL: &[u8] = &[9; 32];

    fn secret() -> ClusterSecret {
        ClusterSecret::new(b"0123456789abcdef-test".to_vec()).unwrap()
    }

    fn hello(master_nonce: &[u8], with: &ClusterSecret) -> Hello {
        let host_nonce = nonce();
        Hello {
            protocol: PROTOCOL_VERSION,
            host_id: HostId::new("h1").unwrap(),
            slots: 2,
            adapters: vec![AdapterInfo {
                name: "python-trainer".into(),
                version: "0.1.0".into(),
                kinds: vec!["q-learning".into()],
                ..Default::default()
            }],
            running: vec![],
            capacity: Default::default(),
            proof: with.host_proof(master_nonce, &host_nonce, "h1", CHANNEL),
            nonce: host_nonce,
            agent: "test".into(),
            containment: vec![],
        }
    }

    #[test]
    fn a_host_that_knows_the_secret_is_accepted() {
        let m = nonce();
        assert_eq!(
            check_hello(&hello(&m, &secret()), &m, &secret(), CHANNEL),
            Ok(())
        );
    }

    #[test]
    fn a_wrong_secret_or_a_replayed_proof_is_refused() {
        let m = nonce();
        let other = ClusterSecret::new(b"another secret of the same size".to_vec()).unwrap();
        assert_eq!(
            check_hello(&hello(&m, &other), &m, &secret(), CHANNEL),
            Err(HandshakeRefusal::BadProof)
        );
        // A proof made for another challenge does not pass this one.
        assert_eq!(
            check_hello(&hello(&m, &secret()), &nonce(), &secret(), CHANNEL),
            Err(HandshakeRefusal::BadProof)
        );
    }

    #[test]
    fn a_proof_made_for_another_tls_session_is_refused() {
        let m = nonce();
        assert_eq!(
            check_hello(&hello(&m, &secret()), &m, &secret(), &[8; 32]),
            Err(HandshakeRefusal::BadProof)
        );
        assert_eq!(
            check_hello(&hello(&m, &secret()), &m, &secret(), &[]),
            Err(HandshakeRefusal::BadProof)
        );
    }

    #[test]
    fn other_protocols_and_absurd_numbers_are_refused() {
        let m = nonce();
        let mut h = hello(&m, &secret());
        h.protocol = 99;
        assert!(matches!(
            check_hello(&h, &m, &secret(), CHANNEL),
            Err(HandshakeRefusal::Protocol { got: 99 })
        ));
        let mut h = hello(&m, &secret());
        h.slots = 0;
        assert!(matches!(
            check_hello(&h, &m, &secret(), CHANNEL),
            Err(HandshakeRefusal::Invalid(_))
        ));
    }
}
