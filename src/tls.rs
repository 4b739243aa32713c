//! What each role makes of the `[tls]` settings: the master's server
//! certificate (and whether hosts must present theirs), what a host trusts
//! and presents, and what the CLI trusts when `api.url` is `https://`. Each
//! refuses a half-made configuration with a message naming the key.

use crate::settings::{Settings, TlsSection};
use std::path::PathBuf;
use trainyard_host::config::HostTls;
use trainyard_proto::tls::{ClientTls, ServerCheck, ServerTls};

/// A `[tls]` configuration a role cannot use.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TlsSettingsError {
    #[error("tls.enabled is set but {0} is not: {1}")]
    Missing(&'static str, &'static str),
    #[error("tls.cert and tls.key go together: set both or neither")]
    HalfIdentity,
    #[error("api.url is {0}, but tls.enabled is set: use https://")]
    PlainUrl(String),
}

fn required(
    value: &Option<PathBuf>,
    key: &'static str,
    why: &'static str,
) -> Result<PathBuf, TlsSettingsError> {
    value.clone().ok_or(TlsSettingsError::Missing(key, why))
}

/// The master's TLS, or `None` for plain TCP.
pub fn master(s: &Settings) -> Result<Option<ServerTls>, TlsSettingsError> {
    let t = &s.tls;
    if !t.enabled {
        return Ok(None);
    }
    let why = "the master presents its certificate to hosts and API clients";
    let client_ca = if t.require_host_certificates {
        Some(required(
            &t.ca,
            "tls.ca",
            "tls.require_host_certificates checks hosts' certificates against it",
        )?)
    } else {
        None
    };
    Ok(Some(ServerTls {
        cert: required(&t.cert, "tls.cert", why)?,
        key: required(&t.key, "tls.key", why)?,
        client_ca,
    }))
}

/// How a client checks the master: against `tls.ca`, or not at all.
fn server_check(t: &TlsSection) -> Result<ServerCheck, TlsSettingsError> {
    if t.insecure_skip_verify {
        return Ok(ServerCheck::Insecure);
    }
    Ok(ServerCheck::Ca(required(
        &t.ca,
        "tls.ca",
        "the master's certificate is checked against it (or set tls.insecure_skip_verify, for tests only)",
    )?))
}

/// A host's TLS to the master, or `None` for plain TCP.
pub fn host(s: &Settings) -> Result<Option<HostTls>, TlsSettingsError> {
    let t = &s.tls;
    if !t.enabled {
        return Ok(None);
    }
    let identity = match (&t.cert, &t.key) {
        (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
        (None, None) => None,
        _ => return Err(TlsSettingsError::HalfIdentity),
    };
    Ok(Some(HostTls {
        client: ClientTls {
            server: server_check(t)?,
            identity,
        },
        server_name: t.server_name.clone(),
    }))
}

/// The CLI's TLS to the API: by the scheme of `api.url` (of any of its
/// URLs, when it names several masters).
pub fn api_client(s: &Settings) -> Result<Option<ClientTls>, TlsSettingsError> {
    let urls: Vec<&str> = s.api.url.split(',').map(str::trim).collect();
    if s.tls.enabled {
        if let Some(plain) = urls.iter().find(|u| u.starts_with("http://")) {
            return Err(TlsSettingsError::PlainUrl(plain.to_string()));
        }
    }
    if !urls.iter().any(|u| u.starts_with("https://")) {
        return Ok(None);
    }
    Ok(Some(ClientTls {
        server: server_check(&s.tls)?,
        identity: None,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enabled() -> Settings {
        let mut s = Settings::default();
        s.tls.enabled = true;
        s
    }

    #[test]
    fn without_tls_every_role_speaks_plain_tcp() {
        let s = Settings::default();
        assert!(master(&s).unwrap().is_none());
        assert!(host(&s).unwrap().is_none());
        assert!(api_client(&s).unwrap().is_none());
    }

    #[test]
    fn the_master_needs_its_certificate_and_for_mutual_tls_the_ca() {
        let mut s = enabled();
        assert_eq!(
            master(&s).unwrap_err(),
            TlsSettingsError::Missing(
                "tls.cert",
                "the master presents its certificate to hosts and API clients"
            )
        );
        s.tls.cert = Some("m.pem".into());
        s.tls.key = Some("m-key.pem".into());
        assert!(master(&s).unwrap().unwrap().client_ca.is_none());
        s.tls.require_host_certificates = true;
        assert!(matches!(
            master(&s),
            Err(TlsSettingsError::Missing("tls.ca", _))
        ));
        s.tls.ca = Some("ca.pem".into());
        assert_eq!(
            master(&s).unwrap().unwrap().client_ca,
            Some("ca.pem".into())
        );
    }

    #[test]
    fn a_host_verifies_the_master_unless_told_loudly_not_to() {
        let mut s = enabled();
        assert!(matches!(
            host(&s),
            Err(TlsSettingsError::Missing("tls.ca", _))
        ));
        s.tls.insecure_skip_verify = true;
        assert!(matches!(
            host(&s).unwrap().unwrap().client.server,
            ServerCheck::Insecure
        ));
        s.tls.insecure_skip_verify = false;
        s.tls.ca = Some("ca.pem".into());
        s.tls.cert = Some("h.pem".into());
        assert_eq!(host(&s).unwrap_err(), TlsSettingsError::HalfIdentity);
        s.tls.key = Some("h-key.pem".into());
        let tls = host(&s).unwrap().unwrap();
        assert_eq!(
            tls.client.identity,
            Some(("h.pem".into(), "h-key.pem".into()))
        );
    }

    #[test]
    fn the_cli_follows_the_scheme_of_the_api_url() {
        let mut s = enabled();
        s.tls.ca = Some("ca.pem".into());
        assert!(matches!(api_client(&s), Err(TlsSettingsError::PlainUrl(_))));
        s.api.url = "https://master.internal:7701".into();
        assert!(api_client(&s).unwrap().is_some());
        s.api.url = "https://m1.internal:7701, http://m2.internal:7701".into();
        assert_eq!(
            api_client(&s).unwrap_err(),
            TlsSettingsError::PlainUrl("http://m2.internal:7701".into())
        );
        s.api.url = "https://m1.internal:7701, https://m2.internal:7701".into();
        assert!(api_client(&s).unwrap().is_some());
        s.tls.enabled = false;
        assert!(
            api_client(&s).unwrap().is_some(),
            "https:// alone asks for TLS"
        );
    }
}
