//! The double's HTTPS face: kube-apiserver serves only HTTPS, and kubectl sends a bearer token
//! only over TLS (client-go's clientcmd sets it for TLS connections alone), so the
//! kubeconfig files the double writes point here, with its CA. In-process clients may use the
//! plain-HTTP listener as well (kube-rs sends tokens over either).

use std::net::SocketAddr;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// A self-signed CA and a serving certificate for `127.0.0.1` and `localhost` (PEM).
pub struct ServingCert {
    /// The CA (what `certificate-authority-data` carries).
    pub ca_pem: String,
    cert_pem: String,
    key_pem: String,
}

impl ServingCert {
    /// Issues one.
    pub fn issue() -> Result<ServingCert, String> {
        let e = |e: rcgen::Error| e.to_string();
        let ca_key = rcgen::KeyPair::generate().map_err(e)?;
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(e)?;
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name = rcgen::DistinguishedName::new();
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "muster-test-apiserver-ca");
        ca.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let ca = ca.self_signed(&ca_key).map_err(e)?;
        let mut leaf =
            rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
                .map_err(e)?;
        leaf.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let key = rcgen::KeyPair::generate().map_err(e)?;
        let cert = leaf.signed_by(&key, &ca, &ca_key).map_err(e)?;
        Ok(ServingCert {
            ca_pem: ca.pem(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, String> {
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(self.cert_pem.as_bytes())
                .collect::<Result<_, _>>()
                .map_err(|e| e.to_string())?;
        let key =
            PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes()).map_err(|e| e.to_string())?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| e.to_string())?;
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(cfg))
    }
}

/// Serves `app` over TLS on `listener` until `stop` flips.
pub async fn serve(
    listener: tokio::net::TcpListener,
    cert: &ServingCert,
    app: axum::Router,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<(), String> {
    let acceptor = tokio_rustls::TlsAcceptor::from(cert.server_config()?);
    loop {
        let accepted: std::io::Result<(tokio::net::TcpStream, SocketAddr)> = tokio::select! {
            a = listener.accept() => a,
            _ = stop.wait_for(|s| *s) => return Ok(()),
        };
        let Ok((tcp, _)) = accepted else { continue };
        let acceptor = acceptor.clone();
        let app = app.clone();
        let mut stop = stop.clone();
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let svc = hyper_util::service::TowerToHyperService::new(app);
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(tls), svc);
            tokio::select! {
                _ = conn => {}
                _ = stop.wait_for(|s| *s) => {}
            }
        });
    }
}
