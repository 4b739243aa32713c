//! `trainyard certs`: a development certificate authority and certificates
//! for a master and its hosts, with rcgen. For trying TLS and mutual TLS out
//! and for tests; a production fleet uses its own PKI (the files are plain
//! PEM either way).
//!
//! In the output directory: `ca.pem` and `ca-key.pem` (the CA; its key
//! stays with the operator), `master.pem` and `master-key.pem` (valid for
//! every `--master-name`), and `host-<id>.pem` and `host-<id>-key.pem` per
//! host (its only name is its id, which the master checks under mutual
//! TLS). Running it again is safe: a CA already in the directory is reused
//! (and never replaced), and a certificate that already exists is kept
//! unless `--reissue` asks for it to be replaced, so hosts can be added later
//! without touching what a running fleet uses. It says, per file, whether it
//! created, kept or replaced it. Keys are written 0600.

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
    #[error("{present} exists but {missing} does not: a CA is never replaced in place (everything it signed would stop being trusted); restore {missing}, or make a new CA in another --out directory")]
    HalfCa { present: PathBuf, missing: PathBuf },
    #[error("{present} exists but {missing} does not: move {present} away, or pass --reissue to replace both")]
    HalfPair { present: PathBuf, missing: PathBuf },
}

/// The names a new master certificate gets when none are asked for.
pub const DEFAULT_MASTER_NAMES: [&str; 2] = ["localhost", "127.0.0.1"];

/// What to write.
pub struct Request<'a> {
    pub dir: &'a Path,
    /// Names for the master's certificate; empty means
    /// [`DEFAULT_MASTER_NAMES`] if there is none yet, and leave it alone if
    /// there is one.
    pub master_names: &'a [String],
    pub hosts: &'a [String],
    pub days: i64,
    /// Replace the master's (when names are given) and the named hosts'
    /// certificates that already exist. The CA is never replaced.
    pub reissue: bool,
}

/// What happened to one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It did not exist and was written.
    Created,
    /// It existed and was left as it was.
    Kept,
    /// It existed and was written anew (`--reissue`).
    Replaced,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(match self {
            Outcome::Created => "created",
            Outcome::Kept => "kept",
            Outcome::Replaced => "replaced",
        })
    }
}

/// Every file `write` looked at, and what it did with each.
#[derive(Debug, Default)]
pub struct Report {
    pub files: Vec<(Outcome, PathBuf)>,
    /// What a kept certificate lacks of what was asked for.
    pub notes: Vec<String>,
}

impl Report {
    /// The files with this outcome.
    pub fn with(&self, outcome: Outcome) -> Vec<&Path> {
        self.files
            .iter()
            .filter(|(o, _)| *o == outcome)
            .map(|(_, p)| p.as_path())
            .collect()
    }
}

/// Writes what is missing: the CA (reused when the directory has one), the
/// master's certificate and each named host's. A certificate that already
/// exists is kept unless `reissue` is set, so running the command again —
/// to add a host, say — changes nothing a running fleet uses.
pub fn write(request: &Request<'_>) -> Result<Report, CertsError> {
    for host in request.hosts {
        trainyard_proto::HostId::new(host.as_str())
            .map_err(|_| CertsError::HostId(host.clone()))?;
    }
    let dir = request.dir;
    std::fs::create_dir_all(dir).map_err(|source| CertsError::Io {
        path: dir.into(),
        source,
    })?;
    let mut report = Report::default();
    let (ca_cert, ca_key) = (dir.join("ca.pem"), dir.join("ca-key.pem"));
    let ca = match (read(&ca_cert)?, read(&ca_key)?) {
        (Some(cert), Some(key)) => {
            report.files.push((Outcome::Kept, ca_cert));
            report.files.push((Outcome::Kept, ca_key));
            DevCa::load(&cert, &key)?
        }
        (None, None) => {
            let ca = DevCa::generate("trainyard development CA")?;
            save(&ca_cert, &ca.cert_pem, 0o644)?;
            save(&ca_key, &ca.key_pem, 0o600)?;
            report.files.push((Outcome::Created, ca_cert));
            report.files.push((Outcome::Created, ca_key));
            ca
        }
        (Some(_), None) => {
            return Err(CertsError::HalfCa {
                present: ca_cert,
                missing: ca_key,
            })
        }
        (None, Some(_)) => {
            return Err(CertsError::HalfCa {
                present: ca_key,
                missing: ca_cert,
            })
        }
    };
    let validity = Validity::days(request.days);
    let master_names: Vec<String> = if request.master_names.is_empty() {
        DEFAULT_MASTER_NAMES.iter().map(|n| n.to_string()).collect()
    } else {
        request.master_names.to_vec()
    };
    let mut pairs = vec![Pair {
        stem: "master".into(),
        names: master_names,
        purpose: Purpose::Server,
        // Without names asked for, --reissue leaves the master alone: it
        // would otherwise lose the names the fleet reaches it by.
        reissue: request.reissue && !request.master_names.is_empty(),
        check_names: !request.master_names.is_empty(),
    }];
    pairs.extend(request.hosts.iter().map(|host| Pair {
        stem: format!("host-{host}"),
        names: vec![host.clone()],
        purpose: Purpose::Client,
        reissue: request.reissue,
        check_names: false,
    }));
    for pair in pairs {
        pair.write(dir, &ca, validity, &mut report)?;
    }
    Ok(report)
}

/// A certificate and its key, `<stem>.pem` and `<stem>-key.pem`.
struct Pair {
    stem: String,
    names: Vec<String>,
    purpose: Purpose,
    /// Replace an existing pair.
    reissue: bool,
    /// Say which of `names` a kept certificate lacks.
    check_names: bool,
}

impl Pair {
    fn write(
        self,
        dir: &Path,
        ca: &DevCa,
        validity: Validity,
        report: &mut Report,
    ) -> Result<(), CertsError> {
        let cert = dir.join(format!("{}.pem", self.stem));
        let key = dir.join(format!("{}-key.pem", self.stem));
        let outcome = match (exists(&cert)?, exists(&key)?, self.reissue) {
            (false, false, _) => Outcome::Created,
            (true, true, false) => Outcome::Kept,
            (_, _, true) => Outcome::Replaced,
            (true, false, false) => {
                return Err(CertsError::HalfPair {
                    present: cert,
                    missing: key,
                })
            }
            (false, true, false) => {
                return Err(CertsError::HalfPair {
                    present: key,
                    missing: cert,
                })
            }
        };
        if outcome == Outcome::Kept {
            if self.check_names {
                let lacking = self.lacking_names(&cert);
                if !lacking.is_empty() {
                    report.notes.push(format!(
                        "{} was kept and does not name {}; pass --reissue to replace it",
                        cert.display(),
                        lacking.join(", ")
                    ));
                }
            }
        } else {
            let issued = ca.issue(&self.names, self.purpose, validity)?;
            save(&cert, &issued.cert_pem, 0o644)?;
            save(&key, &issued.key_pem, 0o600)?;
        }
        report.files.push((outcome, cert));
        report.files.push((outcome, key));
        Ok(())
    }

    /// The names asked for that the certificate at `path` does not carry
    /// (all of them if it cannot be read).
    fn lacking_names(&self, path: &Path) -> Vec<String> {
        let certs = trainyard_proto::tls::load_certs(path, "certificate").unwrap_or_default();
        self.names
            .iter()
            .filter(|name| {
                !certs
                    .first()
                    .is_some_and(|c| trainyard_proto::tls::certificate_names(c, name))
            })
            .cloned()
            .collect()
    }
}

fn exists(path: &Path) -> Result<bool, CertsError> {
    path.try_exists().map_err(|source| CertsError::Io {
        path: path.into(),
        source,
    })
}

/// The file's text, or `None` if there is no such file.
fn read(path: &Path) -> Result<Option<String>, CertsError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(CertsError::Io {
            path: path.into(),
            source,
        }),
    }
}

/// Writes `text` to `path` with `mode`, replacing what was there.
fn save(path: &Path, text: &str, mode: u32) -> Result<(), CertsError> {
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
    file.write_all(text.as_bytes()).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;
    use trainyard_proto::tls::certificate_names;

    fn request<'a>(dir: &'a Path, master_names: &'a [String], hosts: &'a [String]) -> Request<'a> {
        Request {
            dir,
            master_names,
            hosts,
            days: 30,
            reissue: false,
        }
    }

    fn list(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    /// Whether the certificate in `dir/file` is valid for `name`.
    fn names(dir: &Path, file: &str, name: &str) -> bool {
        let certs = trainyard_proto::tls::load_certs(&dir.join(file), "certificate").unwrap();
        certificate_names(&certs[0], name)
    }

    #[test]
    fn certificates_name_what_they_were_issued_for() {
        let dir = tempfile::tempdir().unwrap();
        let report = write(&request(
            dir.path(),
            &list(&["localhost", "127.0.0.1"]),
            &list(&["gpu-1"]),
        ))
        .unwrap();
        assert_eq!(report.with(Outcome::Created).len(), 6, "{report:?}");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("host-gpu-1-key.pem"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(names(dir.path(), "host-gpu-1.pem", "gpu-1"));
        assert!(!names(dir.path(), "host-gpu-1.pem", "gpu-2"));
        assert!(names(dir.path(), "master.pem", "127.0.0.1"));
        assert!(names(dir.path(), "master.pem", "localhost"));
    }

    #[test]
    fn a_second_run_keeps_the_ca_and_every_certificate_and_adds_new_hosts() {
        let dir = tempfile::tempdir().unwrap();
        let masters = list(&["master.internal"]);
        write(&request(dir.path(), &masters, &list(&["gpu-1"]))).unwrap();
        let before: Vec<Vec<u8>> = [
            "ca.pem",
            "ca-key.pem",
            "master.pem",
            "master-key.pem",
            "host-gpu-1.pem",
        ]
        .iter()
        .map(|f| std::fs::read(dir.path().join(f)).unwrap())
        .collect();
        // The guide's way of adding a host: the same command, one more --host;
        // and a bare run, whose default names must not replace the master's.
        let again = write(&request(dir.path(), &masters, &list(&["gpu-1", "gpu-2"]))).unwrap();
        let bare = write(&request(dir.path(), &[], &[])).unwrap();
        let after: Vec<Vec<u8>> = [
            "ca.pem",
            "ca-key.pem",
            "master.pem",
            "master-key.pem",
            "host-gpu-1.pem",
        ]
        .iter()
        .map(|f| std::fs::read(dir.path().join(f)).unwrap())
        .collect();
        assert_eq!(before, after, "a rerun changed an existing file");
        assert_eq!(
            again.with(Outcome::Created),
            vec![
                dir.path().join("host-gpu-2.pem"),
                dir.path().join("host-gpu-2-key.pem")
            ]
        );
        assert_eq!(again.with(Outcome::Kept).len(), 6, "{again:?}");
        assert!(again.notes.is_empty(), "{:?}", again.notes);
        assert!(bare.with(Outcome::Created).is_empty(), "{bare:?}");
        assert!(bare.notes.is_empty(), "{:?}", bare.notes);
        assert!(names(dir.path(), "master.pem", "master.internal"));
    }

    #[test]
    fn a_kept_master_certificate_that_lacks_a_name_asked_for_says_so() {
        let dir = tempfile::tempdir().unwrap();
        write(&request(dir.path(), &list(&["master.internal"]), &[])).unwrap();
        let more = list(&["master.internal", "10.0.0.10"]);
        let report = write(&request(dir.path(), &more, &[])).unwrap();
        assert_eq!(report.notes.len(), 1, "{report:?}");
        assert!(
            report.notes[0].contains("does not name 10.0.0.10"),
            "{:?}",
            report.notes
        );
        assert!(report.notes[0].contains("--reissue"), "{:?}", report.notes);
        assert!(!names(dir.path(), "master.pem", "10.0.0.10"));
    }

    #[test]
    fn reissue_replaces_the_named_certificates_and_never_the_ca() {
        let dir = tempfile::tempdir().unwrap();
        write(&request(
            dir.path(),
            &list(&["master.internal"]),
            &list(&["gpu-1", "gpu-2"]),
        ))
        .unwrap();
        let read = |f: &str| std::fs::read(dir.path().join(f)).unwrap();
        let (ca, ca_key, master, gpu1, gpu2) = (
            read("ca.pem"),
            read("ca-key.pem"),
            read("master.pem"),
            read("host-gpu-1.pem"),
            read("host-gpu-2.pem"),
        );
        let more = list(&["master.internal", "10.0.0.10"]);
        let report = write(&Request {
            reissue: true,
            ..request(dir.path(), &more, &list(&["gpu-1"]))
        })
        .unwrap();
        assert_eq!(report.with(Outcome::Replaced).len(), 4, "{report:?}");
        assert_eq!(
            (read("ca.pem"), read("ca-key.pem")),
            (ca, ca_key),
            "CA replaced"
        );
        assert_ne!(read("master.pem"), master);
        assert_ne!(read("host-gpu-1.pem"), gpu1);
        assert_eq!(
            read("host-gpu-2.pem"),
            gpu2,
            "a host not named was replaced"
        );
        assert!(names(dir.path(), "master.pem", "10.0.0.10"));
        // --reissue without --master-name leaves the master's names alone.
        let master = read("master.pem");
        let report = write(&Request {
            reissue: true,
            ..request(dir.path(), &[], &[])
        })
        .unwrap();
        assert!(report.with(Outcome::Replaced).is_empty(), "{report:?}");
        assert_eq!(read("master.pem"), master);
    }

    #[test]
    fn half_a_ca_or_half_a_pair_is_refused_and_nothing_is_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        write(&request(dir.path(), &[], &list(&["gpu-1"]))).unwrap();
        std::fs::remove_file(dir.path().join("host-gpu-1-key.pem")).unwrap();
        let cert_before = std::fs::read(dir.path().join("host-gpu-1.pem")).unwrap();
        let err = write(&request(dir.path(), &[], &list(&["gpu-1"]))).unwrap_err();
        assert!(matches!(err, CertsError::HalfPair { .. }), "{err}");
        assert!(err.to_string().contains("--reissue"), "{err}");
        assert_eq!(
            std::fs::read(dir.path().join("host-gpu-1.pem")).unwrap(),
            cert_before
        );

        let ca = std::fs::read(dir.path().join("ca.pem")).unwrap();
        std::fs::remove_file(dir.path().join("ca-key.pem")).unwrap();
        let err = write(&Request {
            reissue: true,
            ..request(dir.path(), &[], &list(&["gpu-3"]))
        })
        .unwrap_err();
        assert!(matches!(err, CertsError::HalfCa { .. }), "{err}");
        assert_eq!(std::fs::read(dir.path().join("ca.pem")).unwrap(), ca);
        assert!(!dir.path().join("host-gpu-3.pem").exists());
    }

    #[test]
    fn a_bad_host_id_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let err = write(&request(dir.path(), &[], &list(&["no spaces"]))).unwrap_err();
        assert_eq!(err.to_string(), "\"no spaces\" is not a valid host id");
    }
}
