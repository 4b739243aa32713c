//! `trainyard certs`: a development certificate authority and certificates
//! for a master and its hosts, with rcgen. For trying TLS and mutual TLS out
//! and for tests; a production fleet uses its own PKI (the files are plain
//! PEM either way).
//!
//! In the output directory: `ca.pem` and `ca-key.pem` (the CA; its key
//! stays with the operator), `master.pem` and `master-key.pem` (valid for
//! every `--master-name`), and `host-<id>.pem` and `host-<id>-key.pem` per
//! host (its only name is its id, which the master checks under mutual
//! TLS). A directory that already holds a CA keeps it, so hosts can be added
//! later without re-issuing the others. Keys are written 0600.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use time::{Duration, OffsetDateTime};

/// What a certificate is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// The master's listeners.
    Server,
    /// A host, under mutual TLS.
    Client,
}

/// When a certificate is valid.
#[derive(Debug, Clone, Copy)]
pub struct Validity {
    pub not_before: OffsetDateTime,
    pub not_after: OffsetDateTime,
}

impl Validity {
    /// From an hour ago (clocks differ) for `days` days.
    pub fn days(days: i64) -> Self {
        let now = OffsetDateTime::now_utc();
        Self {
            not_before: now - Duration::hours(1),
            not_after: now + Duration::days(days),
        }
    }
}

/// A certificate and its private key, both PEM.
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

/// A certificate authority that signs the others.
pub struct DevCa {
    issuer: Issuer<'static, KeyPair>,
    /// The CA's own certificate, which peers trust.
    pub cert_pem: String,
    key_pem: String,
}

impl DevCa {
    /// A new CA named `name`, valid ten years.
    pub fn generate(name: &str) -> Result<Self, rcgen::Error> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let validity = Validity::days(3650);
        params.not_before = validity.not_before;
        params.not_after = validity.not_after;
        let key = KeyPair::generate()?;
        let cert_pem = params.self_signed(&key)?.pem();
        let key_pem = key.serialize_pem();
        Ok(Self {
            issuer: Issuer::new(params, key),
            cert_pem,
            key_pem,
        })
    }

    /// The CA written earlier by [`DevCa::write`].
    pub fn load(cert_pem: &str, key_pem: &str) -> Result<Self, rcgen::Error> {
        let key = KeyPair::from_pem(key_pem)?;
        Ok(Self {
            issuer: Issuer::from_ca_cert_pem(cert_pem, key)?,
            cert_pem: cert_pem.to_string(),
            key_pem: key_pem.to_string(),
        })
    }

    /// A certificate for `names` (DNS names or IP addresses), signed by
    /// this CA.
    pub fn issue(
        &self,
        names: &[String],
        purpose: Purpose,
        validity: Validity,
    ) -> Result<Issued, rcgen::Error> {
        let mut params = CertificateParams::new(names.to_vec())?;
        if let Some(first) = names.first() {
            params
                .distinguished_name
                .push(DnType::CommonName, first.as_str());
        }
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![match purpose {
            Purpose::Server => ExtendedKeyUsagePurpose::ServerAuth,
            Purpose::Client => ExtendedKeyUsagePurpose::ClientAuth,
        }];
        params.not_before = validity.not_before;
        params.not_after = validity.not_after;
        let key = KeyPair::generate()?;
        Ok(Issued {
            cert_pem: params.signed_by(&key, &self.issuer)?.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// Why `trainyard certs` could not write its files.
#[derive(Debug, thiserror::Error)]
pub enum CertsError {
    #[error("cannot make a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0:?} is not a valid host id")]
    HostId(String),
}

/// What to write.
pub struct Request<'a> {
    pub dir: &'a Path,
    pub master_names: &'a [String],
    pub hosts: &'a [String],
    pub days: i64,
}

/// Writes (or reuses) the CA and writes the master's and hosts'
/// certificates; returns the files written.
pub fn write(request: &Request<'_>) -> Result<Vec<PathBuf>, CertsError> {
    let dir = request.dir;
    std::fs::create_dir_all(dir).map_err(|source| CertsError::Io {
        path: dir.into(),
        source,
    })?;
    let (ca_cert, ca_key) = (dir.join("ca.pem"), dir.join("ca-key.pem"));
    let mut written = Vec::new();
    let ca = match (
        std::fs::read_to_string(&ca_cert),
        std::fs::read_to_string(&ca_key),
    ) {
        (Ok(cert), Ok(key)) => DevCa::load(&cert, &key)?,
        _ => {
            let ca = DevCa::generate("trainyard development CA")?;
            save(&ca_cert, &ca.cert_pem, 0o644, &mut written)?;
            save(&ca_key, &ca.key_pem, 0o600, &mut written)?;
            ca
        }
    };
    let validity = Validity::days(request.days);
    let mut issue = |stem: String, names: &[String], purpose| -> Result<(), CertsError> {
        let issued = ca.issue(names, purpose, validity)?;
        save(
            &dir.join(format!("{stem}.pem")),
            &issued.cert_pem,
            0o644,
            &mut written,
        )?;
        save(
            &dir.join(format!("{stem}-key.pem")),
            &issued.key_pem,
            0o600,
            &mut written,
        )
    };
    if !request.master_names.is_empty() {
        issue("master".into(), request.master_names, Purpose::Server)?;
    }
    for host in request.hosts {
        trainyard_proto::HostId::new(host.as_str())
            .map_err(|_| CertsError::HostId(host.clone()))?;
        issue(
            format!("host-{host}"),
            std::slice::from_ref(host),
            Purpose::Client,
        )?;
    }
    Ok(written)
}

/// Writes `text` to `path` with `mode`, replacing what was there.
fn save(path: &Path, text: &str, mode: u32, written: &mut Vec<PathBuf>) -> Result<(), CertsError> {
    let io = |source| CertsError::Io {
        path: path.into(),
        source,
    };
    let _ = std::fs::remove_file(path);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(io)?;
    file.write_all(text.as_bytes()).map_err(io)?;
    written.push(path.to_path_buf());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificates_name_what_they_were_issued_for_and_the_ca_is_reused() {
        let dir = tempfile::tempdir().unwrap();
        let request = Request {
            dir: dir.path(),
            master_names: &["localhost".into(), "127.0.0.1".into()],
            hosts: &["gpu-1".into()],
            days: 30,
        };
        let first = write(&request).unwrap();
        assert_eq!(first.len(), 6, "{first:?}");
        let ca = std::fs::read(dir.path().join("ca.pem")).unwrap();
        let hosts = ["gpu-2".to_string()];
        write(&Request {
            hosts: &hosts,
            master_names: &[],
            ..request
        })
        .unwrap();
        assert_eq!(
            std::fs::read(dir.path().join("ca.pem")).unwrap(),
            ca,
            "CA kept"
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("host-gpu-2-key.pem"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let cert = |name: &str| {
            trainyard_proto::tls::load_certs(&dir.path().join(name), "certificate")
                .unwrap()
                .remove(0)
        };
        use trainyard_proto::tls::certificate_names;
        assert!(certificate_names(&cert("host-gpu-2.pem"), "gpu-2"));
        assert!(!certificate_names(&cert("host-gpu-2.pem"), "gpu-1"));
        assert!(certificate_names(&cert("master.pem"), "127.0.0.1"));
        assert!(certificate_names(&cert("master.pem"), "localhost"));
    }

    #[test]
    fn a_bad_host_id_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let err = write(&Request {
            dir: dir.path(),
            master_names: &[],
            hosts: &["no spaces".into()],
            days: 1,
        })
        .unwrap_err();
        assert_eq!(err.to_string(), "\"no spaces\" is not a valid host id");
    }
}
