//! The handshake's challenge-response: a host proves it knows the cluster
//! secret, and the master proves the same back, without the secret crossing
//! the wire.
//!
//! Each side contributes a fresh 32-byte nonce. The host's proof is an
//! HMAC-SHA256, keyed with the secret, over a fixed label, the master's nonce,
//! the host's nonce, the host id and the channel binding; the master's proof
//! uses another label and the nonces the other way round, so a proof can be
//! replayed neither in a later handshake nor in the opposite direction.
//!
//! The channel binding is the TLS session's exporter value (`tls::channel_binding`)
//! when the connection is TLS, and empty on plain TCP: over TLS a proof is
//! good for one TLS session only, so a machine in the middle that relays a
//! handshake between two sessions of its own cannot pass it on.

use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

/// Length of each side's nonce.
pub const NONCE_LEN: usize = 32;

const HOST_LABEL: &[u8] = b"trainyard/1 host proof";
const MASTER_LABEL: &[u8] = b"trainyard/1 master proof";
const REQUEST_LABEL: &[u8] = b"trainyard/1 host request";

/// The `Authorization` scheme of a host's signed request to the master's
/// API (artifact uploads): `Trainyard-Host <host id> <unix ms> <hex HMAC>`.
pub const HOST_REQUEST_SCHEME: &str = "Trainyard-Host";

/// How far a signed request's time may be from the master's clock.
pub const REQUEST_WINDOW_MS: i64 = 5 * 60 * 1000;

/// Why a host's signed request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestRefusal {
    #[error(
        "the request is not signed as `{HOST_REQUEST_SCHEME} <host id> <unix ms> <signature>`"
    )]
    Malformed,
    #[error("the request was signed at {at_ms}, more than five minutes from the master's clock ({now_ms}): check the host's clock")]
    Stale { at_ms: i64, now_ms: i64 },
    #[error("the request's signature is wrong: the host does not know the cluster secret")]
    BadSignature,
}

/// The shared secret of a cluster.
#[derive(Clone)]
pub struct ClusterSecret(Vec<u8>);

/// A secret too short to be worth anything.
#[derive(Debug, thiserror::Error)]
#[error("the cluster secret must be at least 16 bytes long (got {0})")]
pub struct WeakSecret(pub usize);

impl ClusterSecret {
    pub fn new(secret: impl Into<Vec<u8>>) -> Result<Self, WeakSecret> {
        let secret = secret.into();
        if secret.len() < 16 {
            return Err(WeakSecret(secret.len()));
        }
        Ok(Self(secret))
    }

    /// A fresh random secret, hex-encoded, for operators who need one.
    pub fn generate_hex() -> String {
        let mut bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn mac(
        &self,
        label: &[u8],
        first: &[u8],
        second: &[u8],
        host_id: &str,
        channel: &[u8],
    ) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC accepts any key length");
        for part in [label, first, second, host_id.as_bytes(), channel] {
            mac.update(&(part.len() as u32).to_be_bytes());
            mac.update(part);
        }
        mac
    }

    /// What a host sends to prove it knows the secret.
    pub fn host_proof(
        &self,
        master_nonce: &[u8],
        host_nonce: &[u8],
        host_id: &str,
        channel: &[u8],
    ) -> Vec<u8> {
        self.mac(HOST_LABEL, master_nonce, host_nonce, host_id, channel)
            .finalize()
            .into_bytes()
            .to_vec()
    }

    /// Checks a host's proof in constant time.
    pub fn verify_host(
        &self,
        master_nonce: &[u8],
        host_nonce: &[u8],
        host_id: &str,
        channel: &[u8],
        proof: &[u8],
    ) -> bool {
        self.mac(HOST_LABEL, master_nonce, host_nonce, host_id, channel)
            .verify_slice(proof)
            .is_ok()
    }

    /// What the master sends back to prove it knows the secret too.
    pub fn master_proof(
        &self,
        master_nonce: &[u8],
        host_nonce: &[u8],
        host_id: &str,
        channel: &[u8],
    ) -> Vec<u8> {
        self.mac(MASTER_LABEL, host_nonce, master_nonce, host_id, channel)
            .finalize()
            .into_bytes()
            .to_vec()
    }

    /// Checks the master's proof in constant time.
    pub fn verify_master(
        &self,
        master_nonce: &[u8],
        host_nonce: &[u8],
        host_id: &str,
        channel: &[u8],
        proof: &[u8],
    ) -> bool {
        self.mac(MASTER_LABEL, host_nonce, master_nonce, host_id, channel)
            .verify_slice(proof)
            .is_ok()
    }
}

impl ClusterSecret {
    fn request_mac(&self, host_id: &str, at_ms: i64, method: &str, path: &str) -> Hmac<Sha256> {
        self.mac(
            REQUEST_LABEL,
            &at_ms.to_be_bytes(),
            format!("{method} {path}").as_bytes(),
            host_id,
            &[],
        )
    }

    /// The `Authorization` value of a host's request `method path` (the
    /// URL's path as sent, percent-encoded) at `at_ms`. Bound to the
    /// method, path and time: it cannot be moved to another request, and is
    /// refused five minutes on. Over plain HTTP anyone on the path may
    /// replay it meanwhile, as they may read everything else: use TLS.
    pub fn sign_request(&self, host_id: &str, at_ms: i64, method: &str, path: &str) -> String {
        let mac = self.request_mac(host_id, at_ms, method, path).finalize();
        let hex: String = mac
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("{HOST_REQUEST_SCHEME} {host_id} {at_ms} {hex}")
    }

    /// Checks a signed request's `Authorization` value at `now_ms`; the
    /// host's id when it holds.
    pub fn verify_request(
        &self,
        authorization: &str,
        method: &str,
        path: &str,
        now_ms: i64,
    ) -> Result<String, RequestRefusal> {
        let mut parts = authorization.split(' ');
        let (Some(HOST_REQUEST_SCHEME), Some(host), Some(at), Some(hex), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(RequestRefusal::Malformed);
        };
        let at_ms: i64 = at.parse().map_err(|_| RequestRefusal::Malformed)?;
        let signature = decode_hex(hex).ok_or(RequestRefusal::Malformed)?;
        if (now_ms - at_ms).abs() > REQUEST_WINDOW_MS {
            return Err(RequestRefusal::Stale { at_ms, now_ms });
        }
        self.request_mac(host, at_ms, method, path)
            .verify_slice(&signature)
            .map(|()| host.to_string())
            .map_err(|_| RequestRefusal::BadSignature)
    }
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSecret(..)")
    }
}

/// Fresh random bytes for one side of a handshake.
pub fn nonce() -> Vec<u8> {
    let mut n = vec![0u8; NONCE_LEN];
    rand::rng().fill_bytes(&mut n);
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(s: &str) -> ClusterSecret {
        ClusterSecret::new(s.as_bytes().to_vec()).unwrap()
    }

    #[test]
    fn a_host_with_the_secret_passes_and_one_without_does_not() {
        let (m, h) = (nonce(), nonce());
        let good = secret("correct horse battery staple");
        let proof = good.host_proof(&m, &h, "gpu-1", &[]);
        assert!(good.verify_host(&m, &h, "gpu-1", &[], &proof));
        let wrong = secret("incorrect horse battery staple");
        assert!(!good.verify_host(
            &m,
            &h,
            "gpu-1",
            &[],
            &wrong.host_proof(&m, &h, "gpu-1", &[])
        ));
        assert!(!good.verify_host(&m, &h, "gpu-1", &[], &[]));
    }

    #[test]
    fn a_proof_is_bound_to_its_nonces_host_and_direction() {
        let (m, h) = (nonce(), nonce());
        let s = secret("correct horse battery staple");
        let session = [7u8; 32];
        let proof = s.host_proof(&m, &h, "gpu-1", &session);
        assert!(s.verify_host(&m, &h, "gpu-1", &session, &proof));
        assert!(
            !s.verify_host(&nonce(), &h, "gpu-1", &session, &proof),
            "replayed against a new challenge"
        );
        assert!(
            !s.verify_host(&m, &h, "gpu-2", &session, &proof),
            "claimed by another host"
        );
        assert!(
            !s.verify_master(&m, &h, "gpu-1", &session, &proof),
            "reflected back as the master's proof"
        );
        let m_proof = s.master_proof(&m, &h, "gpu-1", &session);
        assert!(s.verify_master(&m, &h, "gpu-1", &session, &m_proof));
    }

    #[test]
    fn a_proof_is_bound_to_its_tls_session() {
        let (m, h) = (nonce(), nonce());
        let s = secret("correct horse battery staple");
        // What a relay in the middle sees: the host's session with the relay
        // and the relay's own session with the master export different values.
        let (host_side, master_side) = ([1u8; 32], [2u8; 32]);
        let relayed = s.host_proof(&m, &h, "gpu-1", &host_side);
        assert!(!s.verify_host(&m, &h, "gpu-1", &master_side, &relayed));
        assert!(
            !s.verify_host(&m, &h, "gpu-1", &[], &relayed),
            "TLS proof on plain TCP"
        );
        let back = s.master_proof(&m, &h, "gpu-1", &master_side);
        assert!(!s.verify_master(&m, &h, "gpu-1", &host_side, &back));
    }

    #[test]
    fn a_signed_request_holds_only_for_its_method_path_and_time() {
        let s = secret("correct horse battery staple");
        let path = "/v1/tasks/7/attempts/1/artifacts/checkpoint/model.pt";
        let signed = s.sign_request("gpu-1", 1_000_000, "PUT", path);
        assert_eq!(
            s.verify_request(&signed, "PUT", path, 1_000_000 + 60_000),
            Ok("gpu-1".to_string())
        );
        let elsewhere = "/v1/tasks/8/attempts/1/artifacts/checkpoint/model.pt";
        assert_eq!(
            s.verify_request(&signed, "PUT", elsewhere, 1_000_000),
            Err(RequestRefusal::BadSignature)
        );
        assert_eq!(
            s.verify_request(&signed, "POST", path, 1_000_000),
            Err(RequestRefusal::BadSignature)
        );
        assert!(matches!(
            s.verify_request(&signed, "PUT", path, 1_000_000 + REQUEST_WINDOW_MS + 1),
            Err(RequestRefusal::Stale { .. })
        ));
        let claimed = signed.replace("gpu-1", "gpu-2");
        assert_eq!(
            s.verify_request(&claimed, "PUT", path, 1_000_000),
            Err(RequestRefusal::BadSignature)
        );
        let forged =
            secret("incorrect horse battery staple").sign_request("gpu-1", 1_000_000, "PUT", path);
        assert_eq!(
            s.verify_request(&forged, "PUT", path, 1_000_000),
            Err(RequestRefusal::BadSignature)
        );
        for bad in [
            "",
            "Bearer x",
            "Trainyard-Host gpu-1 12",
            "Trainyard-Host gpu-1 x ab",
            "Trainyard-Host gpu-1 12 zz",
        ] {
            assert_eq!(
                s.verify_request(bad, "PUT", path, 12),
                Err(RequestRefusal::Malformed),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn short_secrets_are_refused() {
        assert!(ClusterSecret::new(b"short".to_vec()).is_err());
        assert_eq!(ClusterSecret::generate_hex().len(), 64);
    }
}
