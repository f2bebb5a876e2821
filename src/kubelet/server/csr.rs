//! A serving certificate issued through the API server (kubelet's `--rotate-server-certificates`,
//! serverTLSBootstrap): a CertificateSigningRequest for the `kubernetes.io/kubelet-serving`
//! signer (CN `system:node:NAME`, O `system:nodes`, the node's names and IPs), waited on until
//! it is approved and signed, then renewed at 70–90 % of its lifetime (jittered, as kubelet's
//! certificate manager) so it never expires while served. Until the first one is issued the
//! server keeps its self-signed certificate (the API server does not verify kubelets by
//! default), where kubelet would refuse TLS.

use super::tls::{Identity, ServingCert, TlsError};
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use rcgen::{CertificateParams, DnType, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub const SIGNER: &str = "kubernetes.io/kubelet-serving";
/// How often a pending request is looked at.
const POLL: Duration = Duration::from_secs(2);
/// After a failed request: first wait, doubled up to the cap.
const RETRY: Duration = Duration::from_secs(10);
const RETRY_MAX: Duration = Duration::from_secs(300);

#[derive(Debug, thiserror::Error)]
pub enum CsrError {
    #[error("cannot generate the serving key or request: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("creating a CertificateSigningRequest: {0}")]
    Create(kube::Error),
    #[error("reading CertificateSigningRequest {name}: {source}")]
    Read { name: String, source: kube::Error },
    #[error("CertificateSigningRequest {name} {reason}: {message}")]
    Refused {
        name: String,
        reason: String,
        message: String,
    },
    #[error("the certificate issued for {name}: {reason}")]
    Certificate { name: String, reason: String },
    #[error(transparent)]
    Tls(#[from] TlsError),
}

/// A certificate the signer issued, with its validity.
pub struct Issued {
    pub identity: Identity,
    pub not_before: SystemTime,
    pub not_after: SystemTime,
}

/// When to renew a certificate valid from `not_before` to `not_after`: at `fraction` of its
/// lifetime (clamped to 0.7–0.9, kubelet's jittered window).
pub fn renew_at(not_before: SystemTime, not_after: SystemTime, fraction: f64) -> SystemTime {
    let lifetime = not_after.duration_since(not_before).unwrap_or_default();
    not_before + lifetime.mul_f64(fraction.clamp(0.7, 0.9))
}

/// The CSR's PEM and its key: CN system:node:NAME, O system:nodes, `names` as DNS/IP SANs.
pub fn signing_request(node: &str, names: &[String]) -> Result<(String, KeyPair), CsrError> {
    let key = KeyPair::generate()?;
    let mut unique: Vec<String> = Vec::new();
    for name in names {
        if !name.is_empty() && !unique.contains(name) {
            unique.push(name.clone());
        }
    }
    let mut params = CertificateParams::new(unique)?;
    params
        .distinguished_name
        .push(DnType::OrganizationName, "system:nodes");
    params
        .distinguished_name
        .push(DnType::CommonName, format!("system:node:{node}"));
    let pem = params.serialize_request(&key)?.pem()?;
    Ok((pem, key))
}

/// Asks for a serving certificate and waits until it is issued (or denied, or failed).
pub async fn request(
    client: &kube::Client,
    node: &str,
    names: &[String],
) -> Result<Issued, CsrError> {
    let (pem, key) = signing_request(node, names)?;
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let csr = CertificateSigningRequest {
        metadata: ObjectMeta {
            generate_name: Some(format!("csr-{node}-")),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(pem.into_bytes()),
            signer_name: SIGNER.to_string(),
            // ECDSA keys: no key encipherment (kubelet asks the same).
            usages: Some(vec!["digital signature".into(), "server auth".into()]),
            ..Default::default()
        },
        status: None,
    };
    let created = api
        .create(&PostParams::default(), &csr)
        .await
        .map_err(CsrError::Create)?;
    let name = created.metadata.name.unwrap_or_default();
    tracing::info!(csr = %name, signer = SIGNER, "serving certificate requested");
    let certificate = loop {
        let current = api.get(&name).await.map_err(|source| CsrError::Read {
            name: name.clone(),
            source,
        })?;
        let status = current.status.unwrap_or_default();
        let refused = status
            .conditions
            .iter()
            .flatten()
            .find(|c| (c.type_ == "Denied" || c.type_ == "Failed") && c.status == "True");
        if let Some(condition) = refused {
            return Err(CsrError::Refused {
                name,
                reason: condition.type_.to_lowercase(),
                message: condition.message.clone().unwrap_or_default(),
            });
        }
        match status.certificate {
            Some(cert) if !cert.0.is_empty() => break cert.0,
            _ => tokio::time::sleep(POLL).await,
        }
    };
    issued(&name, &certificate, key)
}

fn issued(name: &str, pem: &[u8], key: KeyPair) -> Result<Issued, CsrError> {
    let bad = |reason: String| CsrError::Certificate {
        name: name.to_string(),
        reason,
    };
    let chain = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(e.to_string()))?;
    let leaf = chain.first().ok_or_else(|| bad("no certificate".into()))?;
    let (_, cert) = x509_parser::parse_x509_certificate(leaf).map_err(|e| bad(e.to_string()))?;
    let at = |t: x509_parser::time::ASN1Time| {
        UNIX_EPOCH + Duration::from_secs(u64::try_from(t.timestamp()).unwrap_or(0))
    };
    let validity = cert.validity();
    let (not_before, not_after) = (at(validity.not_before), at(validity.not_after));
    let key = PrivateKeyDer::try_from(key.serialize_der()).map_err(|e| bad(e.to_string()))?;
    Ok(Issued {
        identity: Identity { chain, key },
        not_before,
        not_after,
    })
}

/// Keeps `cert` a current signer-issued certificate: requests one now and again before each
/// expires; failures are retried with back-off while the previous certificate is served.
pub fn spawn_rotation(
    client: kube::Client,
    node: String,
    names: Vec<String>,
    cert: Arc<ServingCert>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut retry = RETRY;
        loop {
            let result = request(&client, &node, &names).await;
            let result = result.and_then(|issued| {
                let window = (issued.not_before, issued.not_after);
                cert.replace(issued.identity)?;
                Ok(window)
            });
            let wait = match result {
                Ok((not_before, not_after)) => {
                    retry = RETRY;
                    let at = renew_at(not_before, not_after, rand::random_range(0.7..0.9));
                    tracing::info!(
                        expires = %chrono::DateTime::<chrono::Utc>::from(not_after),
                        renews = %chrono::DateTime::<chrono::Utc>::from(at),
                        "serving certificate issued"
                    );
                    at.duration_since(SystemTime::now()).unwrap_or_default()
                }
                Err(err) => {
                    tracing::warn!(error = %err, retry_in = ?retry, "serving certificate");
                    let wait = retry;
                    retry = retry.saturating_mul(2).min(RETRY_MAX);
                    wait
                }
            };
            tokio::time::sleep(wait).await;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use x509_parser::certification_request::X509CertificationRequest;
    use x509_parser::prelude::FromDer;

    #[test]
    fn renewal_falls_in_kubelets_window() {
        let start = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let end = start + Duration::from_secs(1000);
        let table = [(0.8, 800), (0.7, 700), (0.9, 900), (0.1, 700), (1.5, 900)];
        for (fraction, want) in table {
            let got = renew_at(start, end, fraction)
                .duration_since(start)
                .unwrap();
            assert_eq!(got, Duration::from_secs(want), "{fraction}");
        }
        // A certificate that ends before it starts renews at once.
        assert_eq!(renew_at(end, start, 0.8), end);
    }

    #[test]
    fn the_request_names_the_node_and_its_addresses() {
        let names = ["n1", "127.0.0.1", "n1", ""].map(String::from);
        let (pem, _) = signing_request("n1", &names).unwrap();
        let der = rustls::pki_types::CertificateSigningRequestDer::from_pem_slice(pem.as_bytes())
            .unwrap();
        let (_, csr) = X509CertificationRequest::from_der(der.as_ref()).unwrap();
        let subject = csr.certification_request_info.subject.to_string();
        assert_eq!(subject, "CN=system:node:n1, O=system:nodes");
        let sans = format!(
            "{:?}",
            csr.requested_extensions().unwrap().collect::<Vec<_>>()
        );
        assert!(
            sans.contains("DNSName(\"n1\")") && sans.contains("[127, 0, 0, 1]"),
            "{sans}"
        );
    }
}
