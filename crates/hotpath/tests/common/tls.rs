//! TLS for the tests: a self-signed certificate on disk, and a rustls client that trusts it.

use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{CertificateDer, ServerName};

/// A self-signed certificate for localhost and 127.0.0.1 written into `dir`: (cert file,
/// key file, the certificate's PEM).
pub fn self_signed(dir: &std::path::Path, name: &str) -> (String, String, Vec<u8>) {
    let c =
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let cert = dir.join(format!("{name}.crt"));
    let key = dir.join(format!("{name}.key"));
    std::fs::write(&cert, c.cert.pem()).unwrap();
    std::fs::write(&key, c.key_pair.serialize_pem()).unwrap();
    (
        cert.display().to_string(),
        key.display().to_string(),
        c.cert.pem().into_bytes(),
    )
}

/// A client config trusting the PEM certificate `ca`, at TLS `version` (both when `None`),
/// asking for ALPN http/1.1.
pub fn client_config(
    ca: &[u8],
    version: Option<&'static rustls::SupportedProtocolVersion>,
) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca) {
        roots.add(c.unwrap()).unwrap();
    }
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let versions: Vec<&'static rustls::SupportedProtocolVersion> = match version {
        Some(v) => vec![v],
        None => vec![&rustls::version::TLS13, &rustls::version::TLS12],
    };
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(cfg)
}

/// A TLS stream to `addr` for the name 127.0.0.1, with `config` or one that trusts `ca`.
pub fn connect(
    addr: SocketAddr,
    ca: &[u8],
    config: Option<Arc<rustls::ClientConfig>>,
) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    let config = config.unwrap_or_else(|| client_config(ca, None));
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let conn = rustls::ClientConnection::new(config, name).unwrap();
    rustls::StreamOwned::new(conn, tcp)
}

/// Sends a GET of `target` on `stream` and reads the answer: (status, body).
pub fn get<S: std::io::Read + std::io::Write>(stream: &mut S, target: &str) -> (u16, Vec<u8>) {
    let req = format!("GET {target} HTTP/1.1\r\nHost: localhost\r\n\r\n");
    stream.write_all(req.as_bytes()).unwrap();
    let mut buf = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(Some(h)) = hotpath_wire::http::parse_response_head(&buf) {
            let len = h.content_length.unwrap_or(0);
            if buf.len() >= h.head_len + len {
                return (h.status, buf[h.head_len..h.head_len + len].to_vec());
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no answer to {target}"
        );
        let mut chunk = [0u8; 8192];
        match stream.read(&mut chunk) {
            Ok(0) => panic!("closed before answering {target}"),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => panic!("{target}: {e}"),
        }
    }
}
