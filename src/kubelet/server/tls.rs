//! The kubelet API's TLS: the serving certificate (`--tls-cert-file`/`--tls-private-key-file`,
//! else a self-signed one for the node's names and IPs, kept in memory as kubelet keeps its
//! own under /var/lib/kubelet/pki), client certificates verified against `--client-ca-file`
//! (optional: token and anonymous requests come without one), and the user a verified client
//! certificate names (CN = user, O = groups).

use super::review::User;
use rcgen::{CertificateParams, DnType, KeyPair};
use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{}: {reason}", path.display())]
    Pem { path: PathBuf, reason: String },
    #[error("{}: no certificate in the file", path.display())]
    NoCertificate { path: PathBuf },
    #[error("--tls-cert-file and --tls-private-key-file go together")]
    HalfPair,
    #[error("cannot generate the self-signed serving certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("the client CA {}: {reason}", path.display())]
    ClientCa { path: PathBuf, reason: String },
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// The certificate chain and key the server presents.
pub struct Identity {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

fn pem_error(path: &Path, err: impl std::fmt::Display) -> TlsError {
    TlsError::Pem {
        path: path.to_path_buf(),
        reason: err.to_string(),
    }
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| pem_error(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(path, e))?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

/// The files' identity, or a self-signed one for `names` (DNS names and IPs).
pub fn identity(
    cert_file: Option<&Path>,
    key_file: Option<&Path>,
    names: &[String],
) -> Result<Identity, TlsError> {
    match (cert_file, key_file) {
        (Some(cert), Some(key)) => Ok(Identity {
            chain: read_certs(cert)?,
            key: PrivateKeyDer::from_pem_file(key).map_err(|e| pem_error(key, e))?,
        }),
        (None, None) => self_signed(names),
        _ => Err(TlsError::HalfPair),
    }
}

/// A self-signed serving certificate valid for a year (as kubelet's), CN = the first name.
pub fn self_signed(names: &[String]) -> Result<Identity, TlsError> {
    let mut unique: Vec<String> = Vec::new();
    for name in names {
        if !name.is_empty() && !unique.contains(name) {
            unique.push(name.clone());
        }
    }
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(unique.clone())?;
    let cn = unique.first().cloned().unwrap_or_else(|| "runp".into());
    params
        .distinguished_name
        .push(DnType::CommonName, format!("{cn}@runp"));
    let day = |t: chrono::DateTime<chrono::Utc>| {
        use chrono::Datelike;
        let month = u8::try_from(t.month()).unwrap_or(1);
        let dom = u8::try_from(t.day()).unwrap_or(1);
        rcgen::date_time_ymd(t.year(), month, dom)
    };
    let now = chrono::Utc::now();
    // Whole days: a day back covers clocks a little behind ours.
    params.not_before = day(now - chrono::Duration::days(1));
    params.not_after = day(now + chrono::Duration::days(365));
    let cert = params.self_signed(&key)?;
    Ok(Identity {
        chain: vec![cert.der().clone()],
        key: PrivateKeyDer::try_from(key.serialize_der())
            .map_err(|e| TlsError::Generate(rcgen::Error::PemError(e.to_string())))?,
    })
}

/// The certificate the server presents, replaceable while it serves (a rotated serving
/// certificate applies to the connections made after the switch).
#[derive(Debug)]
pub struct ServingCert {
    current: RwLock<Arc<CertifiedKey>>,
}

impl ServingCert {
    pub fn new(identity: Identity) -> Result<Arc<ServingCert>, TlsError> {
        Ok(Arc::new(ServingCert {
            current: RwLock::new(certified(identity)?),
        }))
    }

    /// Serves `identity` from now on.
    pub fn replace(&self, identity: Identity) -> Result<(), TlsError> {
        let next = certified(identity)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = next;
        Ok(())
    }

    /// The leaf certificate served now.
    pub fn leaf(&self) -> CertificateDer<'static> {
        let current = self.current.read().unwrap_or_else(|e| e.into_inner());
        current.cert[0].clone()
    }
}

impl ResolvesServerCert for ServingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        )
    }
}

fn certified(identity: Identity) -> Result<Arc<CertifiedKey>, TlsError> {
    let key = rustls::crypto::ring::sign::any_supported_type(&identity.key)?;
    Ok(Arc::new(CertifiedKey::new(identity.chain, key)))
}

/// The rustls server configuration: HTTP/1.1 only (upgrades for exec/attach/portForward).
pub fn server_config(
    cert: Arc<ServingCert>,
    client_ca: Option<&Path>,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = match client_ca {
        Some(path) => {
            let ca_error = |reason: String| TlsError::ClientCa {
                path: path.to_path_buf(),
                reason,
            };
            let mut roots = RootCertStore::empty();
            for cert in read_certs(path)? {
                roots.add(cert).map_err(|e| ca_error(e.to_string()))?;
            }
            // Clients without a certificate go on to token or anonymous authentication; a
            // certificate that does not chain to the CA fails the handshake.
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .allow_unauthenticated()
                .build()
                .map_err(|e| ca_error(e.to_string()))?
        }
        None => WebPkiClientVerifier::no_client_auth(),
    };
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(cert);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The user of a verified client certificate: CN is the name, each O a group (kubelet's x509
/// authenticator). None without a CN.
pub fn certificate_user(der: &[u8]) -> Option<User> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let name = subject
        .iter_common_name()
        .next()?
        .as_str()
        .ok()?
        .to_string();
    if name.is_empty() {
        return None;
    }
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok())
        .map(str::to_string)
        .collect();
    Some(User {
        name,
        uid: None,
        groups,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert_with(cn: Option<&str>, orgs: &[&str]) -> Vec<u8> {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["client".to_string()]).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        if let Some(cn) = cn {
            params.distinguished_name.push(DnType::CommonName, cn);
        }
        for o in orgs {
            params.distinguished_name.push(DnType::OrganizationName, *o);
        }
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn client_certificate_names_user_and_groups() {
        type Case<'a> = (
            Option<&'a str>,
            &'a [&'a str],
            Option<(&'a str, Vec<&'a str>)>,
        );
        let table: [Case; 3] = [
            (
                Some("kube-apiserver-kubelet-client"),
                &["system:masters"],
                Some(("kube-apiserver-kubelet-client", vec!["system:masters"])),
            ),
            (Some("alice"), &[], Some(("alice", vec![]))),
            (None, &["system:masters"], None),
        ];
        for (cn, orgs, want) in table {
            let got = certificate_user(&cert_with(cn, orgs));
            let want = want.map(|(name, groups)| User {
                name: name.into(),
                uid: None,
                groups: groups.into_iter().map(String::from).collect(),
            });
            assert_eq!(got, want, "{cn:?} {orgs:?}");
        }
        assert_eq!(certificate_user(b"not a certificate"), None);
    }

    #[test]
    fn self_signed_covers_names_and_ips_and_builds_a_config() {
        let names = vec![
            "node-a".to_string(),
            "127.0.0.1".to_string(),
            "node-a".to_string(),
            String::new(),
        ];
        let id = self_signed(&names).unwrap();
        let (_, cert) = x509_parser::parse_x509_certificate(&id.chain[0]).unwrap();
        let san = cert.subject_alternative_name().unwrap().unwrap().value;
        let text = format!("{:?}", san.general_names);
        assert!(
            text.contains("node-a") && text.contains("[127, 0, 0, 1]"),
            "{text}"
        );
        assert_eq!(san.general_names.len(), 2);
        let served = ServingCert::new(id).unwrap();
        server_config(served.clone(), None).unwrap();
        let before = served.leaf();
        served
            .replace(self_signed(&["node-b".to_string()]).unwrap())
            .unwrap();
        let after = served.leaf();
        assert_ne!(before, after, "replaced");
        let (_, cert) = x509_parser::parse_x509_certificate(&after).unwrap();
        assert_eq!(cert.subject().to_string(), "CN=node-b@runp");
    }

    #[test]
    fn files_must_come_in_pairs_and_hold_certificates() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        assert!(matches!(
            identity(Some(&empty), None, &[]),
            Err(TlsError::HalfPair)
        ));
        assert!(matches!(
            identity(Some(&empty), Some(&empty), &[]),
            Err(TlsError::NoCertificate { .. })
        ));
        let id = self_signed(&["n".to_string()]).unwrap();
        let served = ServingCert::new(id).unwrap();
        assert!(server_config(served, Some(&empty)).is_err());
    }
}
