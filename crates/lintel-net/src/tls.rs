//! Mutually authenticated TLS for links (rustls, with the `ring`
//! provider): each end presents a certificate chain and checks the other's
//! against the link's certificate authority; the connecting end also
//! checks the name the listener's certificate is for.

use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore, ServerConfig};

use crate::error::NetError;

/// What a link's end needs for TLS: its own certificate chain and key, the
/// authority whose certificates it accepts from the far end, and (for the
/// connecting end) the name the listener's certificate must carry.
#[derive(Clone)]
pub struct Tls {
    chain: Vec<CertificateDer<'static>>,
    key: Arc<PrivateKeyDer<'static>>,
    roots: Arc<RootCertStore>,
    server_name: Option<ServerName<'static>>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("chain", &self.chain.len())
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

impl Tls {
    /// From PEM: this end's certificate chain and private key, and the
    /// authority's certificate(s).
    pub fn from_pem(cert: &[u8], key: &[u8], ca: &[u8]) -> Result<Tls, NetError> {
        let chain = CertificateDer::pem_slice_iter(cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| NetError::Tls(format!("certificate: {e}")))?;
        if chain.is_empty() {
            return Err(NetError::Tls("no certificate in the certificate file".into()));
        }
        let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| NetError::Tls(format!("key: {e}")))?;
        let mut roots = RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(ca) {
            let c = c.map_err(|e| NetError::Tls(format!("authority: {e}")))?;
            roots
                .add(c)
                .map_err(|e| NetError::Tls(format!("authority: {e}")))?;
        }
        if roots.is_empty() {
            return Err(NetError::Tls("no certificate in the authority file".into()));
        }
        Ok(Tls {
            chain,
            key: Arc::new(key),
            roots: Arc::new(roots),
            server_name: None,
        })
    }

    /// [`Tls::from_pem`] from files.
    pub fn from_pem_files(cert: &Path, key: &Path, ca: &Path) -> Result<Tls, NetError> {
        let read = |p: &Path| std::fs::read(p).map_err(|e| NetError::Tls(format!("{}: {e}", p.display())));
        Tls::from_pem(&read(cert)?, &read(key)?, &read(ca)?)
    }

    /// The name the listener's certificate must carry (connecting ends).
    pub fn server_name(mut self, name: &str) -> Result<Tls, NetError> {
        let name = ServerName::try_from(name.to_owned())
            .map_err(|e| NetError::Tls(format!("server name {name:?}: {e}")))?;
        self.server_name = Some(name);
        Ok(self)
    }

    fn provider() -> Arc<rustls::crypto::CryptoProvider> {
        Arc::new(rustls::crypto::ring::default_provider())
    }

    pub(crate) fn acceptor(&self) -> Result<tokio_rustls::TlsAcceptor, NetError> {
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(self.roots.clone(), Tls::provider())
                .build()
                .map_err(|e| NetError::Tls(e.to_string()))?;
        let config = ServerConfig::builder_with_provider(Tls::provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| NetError::Tls(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(self.chain.clone(), self.key.clone_key())
            .map_err(|e| NetError::Tls(e.to_string()))?;
        Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
    }

    pub(crate) fn connector(&self) -> Result<(tokio_rustls::TlsConnector, ServerName<'static>), NetError> {
        let name = self
            .server_name
            .clone()
            .ok_or_else(|| NetError::Tls("a connecting end needs the listener's server name".into()))?;
        let config = ClientConfig::builder_with_provider(Tls::provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| NetError::Tls(e.to_string()))?
            .with_root_certificates(self.roots.clone())
            .with_client_auth_cert(self.chain.clone(), self.key.clone_key())
            .map_err(|e| NetError::Tls(e.to_string()))?;
        Ok((tokio_rustls::TlsConnector::from(Arc::new(config)), name))
    }
}
