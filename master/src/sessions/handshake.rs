//! The master's side of the handshake: send a challenge, check the host's
//! hello (protocol, identity, proof of the cluster secret, sane numbers),
//! and answer with the master's own proof. `check_hello` is the pure part.

use trainyard_proto::auth::ClusterSecret;
use trainyard_proto::messages::Hello;
use trainyard_proto::PROTOCOL_VERSION;

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
    #[error("authentication failed: the host does not know the cluster secret")]
    BadProof,
    #[error("invalid hello: {0}")]
    Invalid(String),
    /// Another live connection holds the host's id.
    #[error("{0}")]
    Duplicate(String),
}

/// Checks a host's hello against the challenge this connection sent.
pub fn check_hello(
    hello: &Hello,
    master_nonce: &[u8],
    secret: &ClusterSecret,
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
    if hello.adapters.len() > MAX_ADAPTERS {
        return Err(HandshakeRefusal::Invalid(format!(
            "at most {MAX_ADAPTERS} adapters, got {}",
            hello.adapters.len()
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
    for a in &hello.adapters {
        let valid = !a.name.is_empty()
            && a.name.len() <= 64
            && a.name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && a.kinds.len() <= 32
            && a.kinds.iter().all(|k| !k.is_empty() && k.len() <= 64);
        if !valid {
            return Err(HandshakeRefusal::Invalid(format!(
                "adapter {:?} has an invalid name or kinds",
                a.name
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use trainyard_proto::auth::nonce;
    use trainyard_proto::messages::AdapterInfo;
    use trainyard_proto::HostId;

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
            }],
            running: vec![],
            capacity: Default::default(),
            proof: with.host_proof(master_nonce, &host_nonce, "h1"),
            nonce: host_nonce,
            agent: "test".into(),
            containment: vec![],
        }
    }

    #[test]
    fn a_host_that_knows_the_secret_is_accepted() {
        let m = nonce();
        assert_eq!(check_hello(&hello(&m, &secret()), &m, &secret()), Ok(()));
    }

    #[test]
    fn a_wrong_secret_or_a_replayed_proof_is_refused() {
        let m = nonce();
        let other = ClusterSecret::new(b"another secret of the same size".to_vec()).unwrap();
        assert_eq!(
            check_hello(&hello(&m, &other), &m, &secret()),
            Err(HandshakeRefusal::BadProof)
        );
        // A proof made for another challenge does not pass this one.
        assert_eq!(
            check_hello(&hello(&m, &secret()), &nonce(), &secret()),
            Err(HandshakeRefusal::BadProof)
        );
    }

    #[test]
    fn other_protocols_and_absurd_numbers_are_refused() {
        let m = nonce();
        let mut h = hello(&m, &secret());
        h.protocol = 99;
        assert!(matches!(
            check_hello(&h, &m, &secret()),
            Err(HandshakeRefusal::Protocol { got: 99 })
        ));
        let mut h = hello(&m, &secret());
        h.slots = 0;
        assert!(matches!(
            check_hello(&h, &m, &secret()),
            Err(HandshakeRefusal::Invalid(_))
        ));
    }
}
