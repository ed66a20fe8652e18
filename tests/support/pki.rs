//! A throwaway CA and the PEM files it signs, in a temporary directory, for tests of TLS
//! (the listeners, and the outbound calls to stand-in services).

use boltq_io::testutil::TempDir;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use std::path::PathBuf;
use std::sync::Arc;

/// A CA and the PEM files it signed, in a temporary directory.
pub struct Pki {
    pub dir: TempDir,
    ca: CertifiedIssuer<'static, KeyPair>,
}

impl Pki {
    pub fn new(name: &str) -> Pki {
        let dir = TempDir::new(name);
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params
            .distinguished_name
            .push(DnType::CommonName, format!("BoltQ test CA {name}"));
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
        Pki { dir, ca }
    }

    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// Writes `<stem>.pem` and `<stem>.key` for a leaf with these names, signed by the CA.
    pub fn leaf(
        &self,
        stem: &str,
        names: &[&str],
        usage: ExtendedKeyUsagePurpose,
    ) -> (PathBuf, PathBuf) {
        self.leaf_for(stem, names, &[usage])
    }

    /// [`Pki::leaf`] allowed for several uses (a cluster node's certificate serves its
    /// listeners and authenticates it to its peers).
    pub fn leaf_for(
        &self,
        stem: &str,
        names: &[&str],
        usages: &[ExtendedKeyUsagePurpose],
    ) -> (PathBuf, PathBuf) {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, stem);
        params.extended_key_usages = usages.to_vec();
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        let (cert_file, key_file) = self.paths(stem);
        std::fs::write(&cert_file, cert.pem()).unwrap();
        std::fs::write(&key_file, key.serialize_pem()).unwrap();
        (cert_file, key_file)
    }

    pub fn server_cert(&self) -> (PathBuf, PathBuf) {
        self.leaf(
            "server",
            &["localhost", "127.0.0.1"],
            ExtendedKeyUsagePurpose::ServerAuth,
        )
    }

    pub fn paths(&self, stem: &str) -> (PathBuf, PathBuf) {
        let d = self.dir.path();
        (d.join(format!("{stem}.pem")), d.join(format!("{stem}.key")))
    }

    /// A rustls server configuration presenting [`Pki::server_cert`] (for 127.0.0.1 and
    /// localhost), for stand-in services reached over `https://`.
    pub fn rustls_server(&self) -> Arc<rustls::ServerConfig> {
        let (cert, key) = self.server_cert();
        let chain = boltq_io::tls::read_certificates(&cert, "certificate").unwrap();
        let key = boltq_io::tls::read_private_key(&key).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        Arc::new(config)
    }
}
