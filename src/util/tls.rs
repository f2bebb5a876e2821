//! The rustls client configuration every HTTPS client of runp uses: the ring provider passed
//! explicitly (no process-wide default provider), the system's roots (`/etc/ssl/certs`,
//! `SSL_CERT_FILE`), and Mozilla's roots (webpki-roots) when the system has none.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A client config for HTTP/1.1 over TLS 1.2/1.3 with certificate verification.
pub fn client_config() -> Result<rustls::ClientConfig, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(root_store())
        .with_no_client_auth();
    // reqwest takes a preconfigured config as is; runp's reqwest speaks HTTP/1.1 only.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// A client config for one registry host of a hosts.toml: extra CA files (PEM) trusted besides
/// the roots, a client certificate (PEM; the key in its own file or with the certificate), or
/// no verification of the server's identity at all (`skip_verify`).
pub fn client_config_for(
    ca: &[PathBuf],
    client: Option<(&Path, Option<&Path>)>,
    skip_verify: bool,
) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = if skip_verify {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyServer(provider)))
    } else {
        let mut roots = root_store();
        for path in ca {
            let shown = path.display();
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| format!("CA file {shown}: {e}"))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("CA file {shown}: {e}"))?;
            if certs.is_empty() {
                return Err(format!("CA file {shown}: no certificate in it"));
            }
            for cert in certs {
                roots
                    .add(cert)
                    .map_err(|e| format!("CA file {shown}: {e}"))?;
            }
        }
        builder.with_root_certificates(roots)
    };
    let mut config = match client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let shown = cert.display();
            let chain = CertificateDer::pem_file_iter(cert)
                .map_err(|e| format!("client certificate {shown}: {e}"))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("client certificate {shown}: {e}"))?;
            let key_path = key.unwrap_or(cert);
            let key = PrivateKeyDer::from_pem_file(key_path)
                .map_err(|e| format!("client key {}: {e}", key_path.display()))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("client certificate {shown}: {e}"))?
        }
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// `skip_verify`: any server certificate is taken (handshake signatures are still checked).
#[derive(Debug)]
struct AnyServer(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyServer {
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

fn root_store() -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for err in &native.errors {
        tracing::debug!(error = %err, "loading system TLS roots");
    }
    let (added, ignored) = roots.add_parsable_certificates(native.certs);
    if ignored > 0 {
        tracing::debug!(ignored, "unparsable system TLS roots skipped");
    }
    if added == 0 {
        // Minimal hosts (no ca-certificates) still get a usable, well-known set.
        tracing::info!("no system TLS roots found; using the bundled Mozilla roots");
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    }
    roots
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_a_verifying_http1_config() {
        let config = client_config().expect("config");
        assert_eq!(config.alpn_protocols, vec![b"http/1.1".to_vec()]);
    }

    #[test]
    fn hosts_toml_settings_build_or_name_the_bad_file() {
        assert!(client_config_for(&[], None, true).is_ok());
        assert!(client_config_for(&[], None, false).is_ok());
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        let missing = dir.path().join("missing.pem");
        for (ca, client) in [
            (vec![empty.clone()], None),
            (vec![missing.clone()], None),
            (vec![], Some((missing.as_path(), None))),
        ] {
            let err = client_config_for(&ca, client, false).expect_err("refused");
            assert!(err.contains(".pem"), "{err}");
        }
    }
}
