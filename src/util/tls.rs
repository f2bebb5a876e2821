//! The rustls client configuration every HTTPS client of runp uses: the ring provider passed
//! explicitly (no process-wide default provider), the system's roots (`/etc/ssl/certs`,
//! `SSL_CERT_FILE`), and Mozilla's roots (webpki-roots) when the system has none.

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
}
