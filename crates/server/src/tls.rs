//! TLS on the HTTPS listeners, with rustls (ring's cryptography): TLS 1.3 and 1.2, ALPN
//! `http/1.1`, resumption by session id (one cache for all workers) and by ticket. The
//! certificate and key are read again on SIGHUP ([`Tls::reload`]); the session cache and the
//! ticket key stay across reloads, so clients keep resuming.
//!
//! Files are read bounded (1 MiB) and only if regular: a path that names a FIFO or a device
//! would otherwise hang the start or the reload.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use parking_lot::RwLock;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ProducesTickets, ServerSessionMemoryCache, StoresServerSessions};
use rustls::ServerConfig;

/// The most a certificate or key file may hold.
const MAX_FILE: u64 = 1 << 20;

/// Why the certificate or key could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("{key} {path}: {why}")]
    File {
        /// The config key that names it.
        key: &'static str,
        /// The file.
        path: String,
        /// What was wrong.
        why: String,
    },
    /// rustls refused the pair (a key that does not match, an unsupported key type).
    #[error("tls.cert_file and tls.key_file: {0}")]
    Pair(String),
}

/// Reads `path` (the value of config key `key`): a regular file of at most 1 MiB.
fn read_bounded(key: &'static str, path: &str) -> Result<Vec<u8>, TlsError> {
    let err = |why: String| TlsError::File {
        key,
        path: path.to_string(),
        why,
    };
    let meta = std::fs::metadata(Path::new(path)).map_err(|e| err(e.to_string()))?;
    if !meta.is_file() {
        return Err(err("not a regular file".into()));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_FILE + 1).read_to_end(&mut bytes))
        .map_err(|e| err(e.to_string()))?;
    if bytes.len() as u64 > MAX_FILE {
        return Err(err("larger than 1 MiB".into()));
    }
    Ok(bytes)
}

/// The certificate chain and key of `cfg`, parsed.
pub fn load_pair(
    cfg: &hotpath_config::TlsConfig,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    let pem = read_bounded("tls.cert_file", &cfg.cert_file)?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::File {
            key: "tls.cert_file",
            path: cfg.cert_file.clone(),
            why: format!("not PEM certificates: {e}"),
        })?;
    if certs.is_empty() {
        return Err(TlsError::File {
            key: "tls.cert_file",
            path: cfg.cert_file.clone(),
            why: "no certificate in it".into(),
        });
    }
    let pem = read_bounded("tls.key_file", &cfg.key_file)?;
    let key = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| TlsError::File {
        key: "tls.key_file",
        path: cfg.key_file.clone(),
        why: format!("no PEM private key: {e}"),
    })?;
    Ok((certs, key))
}

/// The TLS settings every HTTPS connection starts from.
pub struct Tls {
    cfg: hotpath_config::TlsConfig,
    current: RwLock<Arc<ServerConfig>>,
    sessions: Arc<dyn StoresServerSessions>,
    ticketer: Option<Arc<dyn ProducesTickets>>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("cfg", &self.cfg).finish()
    }
}

impl Tls {
    /// Loads the certificate and key of `cfg`.
    pub fn new(cfg: &hotpath_config::TlsConfig) -> Result<Tls, TlsError> {
        let sessions: Arc<dyn StoresServerSessions> = if cfg.session_cache > 0 {
            ServerSessionMemoryCache::new(cfg.session_cache)
        } else {
            Arc::new(rustls::server::NoServerSessionStorage {})
        };
        let ticketer = if cfg.tickets {
            Some(
                rustls::crypto::ring::Ticketer::new()
                    .map_err(|e| TlsError::Pair(format!("no ticket key: {e}")))?,
            )
        } else {
            None
        };
        let first = build(cfg, &sessions, &ticketer)?;
        Ok(Tls {
            cfg: cfg.clone(),
            current: RwLock::new(first),
            sessions,
            ticketer,
        })
    }

    /// What a new connection starts from.
    pub fn config(&self) -> Arc<ServerConfig> {
        self.current.read().clone()
    }

    /// Reads the certificate and key again; on failure the old ones stay.
    pub fn reload(&self) -> Result<(), TlsError> {
        let next = build(&self.cfg, &self.sessions, &self.ticketer)?;
        *self.current.write() = next;
        Ok(())
    }
}

/// A server config of `cfg`'s pair sharing `sessions` and `ticketer`.
fn build(
    cfg: &hotpath_config::TlsConfig,
    sessions: &Arc<dyn StoresServerSessions>,
    ticketer: &Option<Arc<dyn ProducesTickets>>,
) -> Result<Arc<ServerConfig>, TlsError> {
    let (certs, key) = load_pair(cfg)?;
    // ring's provider: it builds with no C toolchain beyond a compiler. It lacks the
    // post-quantum key exchange (hence the deprecation); clients fall back to X25519.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut sc = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| TlsError::Pair(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| TlsError::Pair(e.to_string()))?;
    sc.alpn_protocols = vec![b"http/1.1".to_vec()];
    sc.session_storage = sessions.clone();
    if let Some(t) = ticketer {
        sc.ticketer = t.clone();
    }
    // One ticket per full handshake is enough for a client that reconnects one connection.
    sc.send_tls13_tickets = 1;
    Ok(Arc::new(sc))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(dir: &Path, name: &str) -> hotpath_config::TlsConfig {
        let c = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let cert = dir.join(format!("{name}.crt"));
        let key = dir.join(format!("{name}.key"));
        std::fs::write(&cert, c.cert.pem()).unwrap();
        std::fs::write(&key, c.key_pair.serialize_pem()).unwrap();
        hotpath_config::TlsConfig {
            cert_file: cert.display().to_string(),
            key_file: key.display().to_string(),
            ..Default::default()
        }
    }

    #[test]
    fn files_are_checked_and_a_bad_reload_keeps_the_old_pair() {
        let dir = std::env::temp_dir().join(format!("hotpath-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = pair(&dir, "a");
        let tls = Tls::new(&good).unwrap();
        let first = tls.config();
        // A key of another certificate, a missing file, a directory, garbage.
        let other = pair(&dir, "b");
        let mixed = hotpath_config::TlsConfig {
            key_file: other.key_file.clone(),
            ..good.clone()
        };
        assert!(
            matches!(Tls::new(&mixed), Err(TlsError::Pair(_))),
            "{:?}",
            Tls::new(&mixed)
        );
        let missing = hotpath_config::TlsConfig {
            cert_file: dir.join("none.crt").display().to_string(),
            ..good.clone()
        };
        assert!(Tls::new(&missing)
            .unwrap_err()
            .to_string()
            .contains("tls.cert_file"));
        let a_dir = hotpath_config::TlsConfig {
            key_file: dir.display().to_string(),
            ..good.clone()
        };
        assert!(Tls::new(&a_dir)
            .unwrap_err()
            .to_string()
            .contains("not a regular file"));
        std::fs::write(&good.cert_file, "garbage").unwrap();
        assert!(tls.reload().is_err());
        assert!(Arc::ptr_eq(&first, &tls.config()));
        // A good pair again: taken.
        let c = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        std::fs::write(&good.cert_file, c.cert.pem()).unwrap();
        std::fs::write(&good.key_file, c.key_pair.serialize_pem()).unwrap();
        tls.reload().unwrap();
        assert!(!Arc::ptr_eq(&first, &tls.config()));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
