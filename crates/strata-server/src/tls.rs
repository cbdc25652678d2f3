//! TLS for both listeners (rustls with the ring provider: no aws-lc-rs, so no cmake), from the
//! config file's PEM certificate chain and key.

use std::sync::Arc;

use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::Tls;
use crate::error::ServerError;

/// The acceptor for `tls`, or an error naming the file that is wrong.
pub fn acceptor(tls: &Tls) -> Result<TlsAcceptor, ServerError> {
    let config_error = |path: &std::path::Path, message: String| ServerError::Config {
        path: path.to_owned(),
        message,
    };
    let certs = CertificateDer::pem_file_iter(&tls.cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| config_error(&tls.cert, format!("TLS certificate: {e}")))?;
    if certs.is_empty() {
        return Err(config_error(
            &tls.cert,
            "TLS certificate: no certificate in the file".into(),
        ));
    }
    let key = PrivateKeyDer::from_pem_file(&tls.key)
        .map_err(|e| config_error(&tls.key, format!("TLS key: {e}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|builder| builder.with_no_client_auth().with_single_cert(certs, key))
        .map_err(|e| config_error(&tls.cert, format!("TLS: {e}")))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}
