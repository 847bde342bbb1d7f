//! TLS on the HTTPS listeners, with rustls (ring's cryptography): TLS 1.3 and 1.2, ALPN
//! `http/1.1`, resumption by session id (one cache for all workers) and by ticket. The
//! certificate and key are read again on SIGHUP ([`Tls::reload`]); the session cache and the
//! ticket key stay across reloads, so clients keep resuming.
//!
//! Files are read bounded (1 MiB) and only if regular: a path that names a FIFO or a device
//! would otherwise hang the start or the reload.

use std::io::{self, Read, Write};
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

/// One TLS session's ciphertext read from the socket at most: a handshake message of 64 KiB
/// (rustls' own bound) spread over records, plus a record begun after it.
const MAX_IN: usize = 0x1_0000 + MAX_RECORD;
/// A TLS record on the wire at most (TLS 1.2's expansion allowance included).
const MAX_RECORD: usize = 5 + 16_384 + 2_048;
/// The first ciphertext buffer: a ClientHello fits, and so do a few requests' records.
const IN_START: usize = 4_096;
/// Plaintext encrypted at a time: one record's worth.
const CHUNK: usize = 16_384;
/// What a record adds to its plaintext at most (header, content type, nonce, tag), rounded up.
const RECORD_OVERHEAD: usize = 64;

/// Ciphertext buffers kept between uses, per thread (a worker's): at most this many of each
/// kind.
const POOLED: usize = 32;

std::thread_local! {
    /// Input buffers of `IN_START` bytes that hold nothing.
    static IN_POOL: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
    /// Output buffers (empty, a record's capacity at most).
    static OUT_POOL: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// An input buffer of `IN_START` bytes, from the thread's pool when it has one.
fn take_in() -> Vec<u8> {
    IN_POOL
        .with(|p| p.borrow_mut().pop())
        .unwrap_or_else(|| vec![0; IN_START])
}

/// An empty output buffer, from the thread's pool when it has one.
fn take_out() -> Vec<u8> {
    OUT_POOL.with(|p| p.borrow_mut().pop()).unwrap_or_default()
}

/// Keeps `buf` in `pool` for the next use, when there is room.
fn pool_up(pool: &'static std::thread::LocalKey<std::cell::RefCell<Vec<Vec<u8>>>>, buf: Vec<u8>) {
    pool.with(|p| {
        let mut p = p.borrow_mut();
        if p.len() < POOLED {
            p.push(buf);
        }
    });
}

/// A connection's TLS session, on rustls' unbuffered API: the ciphertext lives in buffers
/// the session holds only while bytes wait in them (a record begun, a socket full) and that
/// otherwise go back to the thread's pool, so buffers pass from connection to connection
/// instead of being allocated for each (the buffered API keeps a 4 KiB read buffer for a
/// connection's whole life: a waiting WebSocket peer cost twice what it does now). Decrypted
/// data goes straight into the caller's buffer.
pub struct Session {
    conn: rustls::server::UnbufferedServerConnection,
    /// Ciphertext received: `inb[in_start..in_len]` is not processed yet (a record begun, or
    /// records left when the caller's buffer filled up). What rustls has processed is dropped
    /// by moving `in_start`; the rest moves to the front only when the buffer needs room.
    inb: Vec<u8>,
    in_start: usize,
    in_len: usize,
    /// Ciphertext to send: `outb[out_pos..]`.
    outb: Vec<u8>,
    out_pos: usize,
    /// Plaintext decrypted that did not fit the caller's buffer: `spill[spill_pos..]`.
    spill: Vec<u8>,
    spill_pos: usize,
    /// The client sent close_notify.
    peer_closed: bool,
    /// The session failed; nothing more is read or written through it.
    failed: bool,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("in", &(self.in_len - self.in_start))
            .field("out", &(self.outb.len() - self.out_pos))
            .field("handshaking", &self.conn.is_handshaking())
            .finish()
    }
}

/// What one run of the state machine did.
#[derive(Default)]
struct Pumped {
    /// Plaintext bytes put into the caller's buffer.
    read: usize,
    /// Plaintext bytes encrypted.
    written: usize,
}

impl Session {
    /// A session for a new connection.
    pub fn new(config: Arc<ServerConfig>) -> Result<Session, rustls::Error> {
        Ok(Session {
            conn: rustls::server::UnbufferedServerConnection::new(config)?,
            inb: Vec::new(),
            in_start: 0,
            in_len: 0,
            outb: Vec::new(),
            out_pos: 0,
            spill: Vec::new(),
            spill_pos: 0,
            peer_closed: false,
            failed: false,
        })
    }

    /// The handshake is not done yet.
    pub fn is_handshaking(&self) -> bool {
        self.conn.is_handshaking()
    }

    /// Full or resumed, once the handshake is done.
    pub fn handshake_kind(&self) -> Option<rustls::HandshakeKind> {
        self.conn.handshake_kind()
    }

    /// Ciphertext is waiting for the socket.
    pub fn wants_write(&self) -> bool {
        self.out_pos < self.outb.len()
    }

    /// Bytes its buffers hold.
    pub fn footprint(&self) -> usize {
        self.inb.len() + self.outb.capacity() + self.spill.capacity()
    }

    /// Gives back the buffers that hold nothing (a connection that waits).
    pub fn give_back(&mut self) {
        self.release_in();
        if !self.wants_write() {
            self.release_out();
        }
        if self.spill_pos == self.spill.len() {
            self.spill = Vec::new();
            self.spill_pos = 0;
        }
    }

    /// Reads what the client sent into `buf` (not empty), as `Read` does: `Ok(0)` at its
    /// end (close_notify or the socket's), `WouldBlock` once the socket is drained,
    /// `InvalidData` when the session fails (its alert is sent first). The handshake's own
    /// messages are sent on the way (a full socket leaves them to [`Session::send`]).
    pub fn read<S: Read + Write>(&mut self, stream: &mut S, buf: &mut [u8]) -> io::Result<usize> {
        let r = self.read_records(stream, buf);
        self.release_in();
        r
    }

    /// [`Session::read`], holding the input buffer.
    fn read_records<S: Read + Write>(
        &mut self,
        stream: &mut S,
        buf: &mut [u8],
    ) -> io::Result<usize> {
        if self.failed {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "TLS failed"));
        }
        loop {
            if self.spill_pos < self.spill.len() {
                let n = (self.spill.len() - self.spill_pos).min(buf.len());
                buf[..n].copy_from_slice(&self.spill[self.spill_pos..self.spill_pos + n]);
                self.spill_pos += n;
                if self.spill_pos == self.spill.len() {
                    self.spill.clear();
                    self.spill_pos = 0;
                }
                return Ok(n);
            }
            let got = self.pump(buf, &[], false);
            match self.send(stream) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            let got = got.map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            if got.read > 0 {
                return Ok(got.read);
            }
            if self.peer_closed {
                return Ok(0);
            }
            if self.inb.is_empty() {
                self.inb = take_in();
            }
            if self.in_len == self.inb.len() && self.in_start > 0 {
                self.inb.copy_within(self.in_start..self.in_len, 0);
                self.in_len -= self.in_start;
                self.in_start = 0;
            }
            if self.in_len == self.inb.len() {
                if self.inb.len() >= MAX_IN {
                    self.failed = true;
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "a TLS message larger than 64 KiB",
                    ));
                }
                let grown = (self.inb.len() * 2).clamp(IN_START, MAX_IN);
                self.inb.resize(grown, 0);
            }
            match stream.read(&mut self.inb[self.in_len..])? {
                0 => return Ok(0),
                n => self.in_len += n,
            }
        }
    }

    /// Encrypts up to one record of `plain`; how many bytes it took (0 while the handshake
    /// is not done). The ciphertext waits for [`Session::send`].
    pub fn encrypt(&mut self, plain: &[u8]) -> Result<usize, rustls::Error> {
        if self.failed {
            return Err(rustls::Error::General("TLS failed".into()));
        }
        Ok(self.pump(&mut [], plain, false)?.written)
    }

    /// Queues close_notify (once the handshake is done; best effort).
    pub fn close_notify(&mut self) {
        if !self.failed && !self.is_handshaking() {
            let _ = self.pump(&mut [], &[], true);
        }
    }

    /// Writes the ciphertext pending: `Ok(true)` once all of it is sent, `Ok(false)` when the
    /// socket is full.
    pub fn send<S: Write>(&mut self, stream: &mut S) -> io::Result<bool> {
        while self.out_pos < self.outb.len() {
            match stream.write(&self.outb[self.out_pos..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.out_pos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.release_out();
        Ok(true)
    }

    /// Puts the output buffer, all of it sent, back in the pool.
    fn release_out(&mut self) {
        self.out_pos = 0;
        let mut out = std::mem::take(&mut self.outb);
        if out.capacity() > 0 && out.capacity() <= CHUNK + 2 * RECORD_OVERHEAD {
            out.clear();
            pool_up(&OUT_POOL, out);
        }
    }

    /// Puts the input buffer back in the pool once it holds nothing.
    fn release_in(&mut self) {
        if self.in_start == self.in_len && !self.inb.is_empty() {
            let inb = std::mem::take(&mut self.inb);
            self.in_start = 0;
            self.in_len = 0;
            if inb.len() == IN_START {
                pool_up(&IN_POOL, inb);
            }
        }
    }

    /// Runs rustls over the ciphertext received until it needs more: handshake records to
    /// send go to `outb`; application data into `dest` (what does not fit, to `spill`; it
    /// stops once `dest` is full, leaving whole records for the next call); with the
    /// handshake done, one record of `plain` is encrypted, and close_notify if `close`.
    fn pump(
        &mut self,
        dest: &mut [u8],
        plain: &[u8],
        close: bool,
    ) -> Result<Pumped, rustls::Error> {
        use rustls::unbuffered::ConnectionState;
        let mut done = Pumped::default();
        loop {
            let status = self
                .conn
                .process_tls_records(&mut self.inb[self.in_start..self.in_len]);
            let mut discard = status.discard;
            let mut more = true;
            let mut failure = None;
            match status.state {
                Err(e) => failure = Some(e),
                Ok(ConnectionState::ReadTraffic(mut r)) => {
                    while let Some(record) = r.next_record() {
                        match record {
                            Ok(record) => {
                                discard += record.discard;
                                let n = record.payload.len().min(dest.len() - done.read);
                                dest[done.read..done.read + n]
                                    .copy_from_slice(&record.payload[..n]);
                                done.read += n;
                                self.spill.extend_from_slice(&record.payload[n..]);
                            }
                            Err(e) => {
                                failure = Some(e);
                                break;
                            }
                        }
                    }
                    // A writer's call (no `dest`) keeps what came for the next read.
                    more = dest.is_empty() || done.read < dest.len();
                }
                Ok(ConnectionState::ReadEarlyData(mut r)) => {
                    // Early data is not enabled (max_early_data_size 0): nothing should come.
                    while let Some(record) = r.next_record() {
                        if let Ok(record) = record {
                            discard += record.discard;
                        }
                    }
                }
                Ok(ConnectionState::EncodeTlsData(mut e)) => {
                    append(&mut self.outb, 2_048, |out| encoded(e.encode(out)));
                }
                // What `outb` holds leaves before anything queued after it.
                Ok(ConnectionState::TransmitTlsData(t)) => t.done(),
                Ok(ConnectionState::PeerClosed) => self.peer_closed = true,
                Ok(ConnectionState::Closed) => {
                    self.peer_closed = true;
                    more = false;
                }
                Ok(ConnectionState::WriteTraffic(mut w)) => {
                    more = false;
                    let take = plain.len().min(CHUNK);
                    let data = &plain[..take];
                    let sealed = (take == 0
                        || append(&mut self.outb, take + RECORD_OVERHEAD, |out| {
                            encrypted(w.encrypt(data, out))
                        }))
                        && (!close
                            || append(&mut self.outb, RECORD_OVERHEAD, |out| {
                                encrypted(w.queue_close_notify(out))
                            }));
                    if sealed {
                        done.written = take;
                    } else {
                        failure = Some(rustls::Error::EncryptError);
                    }
                }
                Ok(ConnectionState::BlockedHandshake) => more = false,
                Ok(_) => more = false,
            }
            self.consume(discard);
            if let Some(e) = failure {
                self.fail();
                return Err(e);
            }
            if !more {
                return Ok(done);
            }
        }
    }

    /// Drops `n` processed bytes from the front of the ciphertext received.
    fn consume(&mut self, n: usize) {
        self.in_start += n;
        if self.in_start == self.in_len {
            self.in_start = 0;
            self.in_len = 0;
        }
    }

    /// Marks the session failed and queues the alert that says why, if rustls has one.
    /// (Only while rustls holds records to send: with none, the next call would process the
    /// next message, which a failed session must not do.)
    fn fail(&mut self) {
        use rustls::unbuffered::ConnectionState;
        self.failed = true;
        while self.conn.wants_write() {
            let status = self
                .conn
                .process_tls_records(&mut self.inb[self.in_start..self.in_len]);
            let discard = status.discard;
            let Ok(ConnectionState::EncodeTlsData(mut e)) = status.state else {
                break;
            };
            append(&mut self.outb, 256, |out| encoded(e.encode(out)));
            self.consume(discard);
        }
    }
}

/// Appends to `outb` (taken from the pool when it has no buffer) what `write` puts into the
/// space it is given: first `room` bytes, then as many as `write` says it needs
/// (`Err(Some(n))`). False when `write` gives up (`Err(None)`), with nothing appended.
fn append(
    outb: &mut Vec<u8>,
    room: usize,
    mut write: impl FnMut(&mut [u8]) -> Result<usize, Option<usize>>,
) -> bool {
    if outb.capacity() == 0 {
        *outb = take_out();
    }
    let start = outb.len();
    let mut room = room;
    loop {
        outb.resize(start + room, 0);
        match write(&mut outb[start..]) {
            Ok(n) => {
                outb.truncate(start + n);
                return true;
            }
            Err(Some(need)) => room = need,
            Err(None) => {
                outb.truncate(start);
                return false;
            }
        }
    }
}

/// An encoding's result as [`append`] takes it (encoded already: nothing to append).
fn encoded(r: Result<usize, rustls::unbuffered::EncodeError>) -> Result<usize, Option<usize>> {
    match r {
        Ok(n) => Ok(n),
        Err(rustls::unbuffered::EncodeError::InsufficientSize(s)) => Err(Some(s.required_size)),
        Err(rustls::unbuffered::EncodeError::AlreadyEncoded) => Err(None),
    }
}

/// An encryption's result as [`append`] takes it (the encrypter exhausted: it gives up).
fn encrypted(r: Result<usize, rustls::unbuffered::EncryptError>) -> Result<usize, Option<usize>> {
    match r {
        Ok(n) => Ok(n),
        Err(rustls::unbuffered::EncryptError::InsufficientSize(s)) => Err(Some(s.required_size)),
        Err(_) => Err(None),
    }
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

    /// One end of an in-memory socket: reads what `input` holds (`WouldBlock` when it is
    /// empty, the end once `eof`), writes to `output`.
    #[derive(Default)]
    struct Pipe {
        input: std::collections::VecDeque<u8>,
        output: Vec<u8>,
        eof: bool,
        /// Bytes handed out per read at most (a slow network).
        per_read: usize,
    }

    impl Pipe {
        /// A pipe that hands out all it holds at each read.
        fn whole() -> Pipe {
            Pipe {
                per_read: usize::MAX,
                ..Pipe::default()
            }
        }
    }

    impl Read for Pipe {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.input.is_empty() {
                return if self.eof {
                    Ok(0)
                } else {
                    Err(io::ErrorKind::WouldBlock.into())
                };
            }
            let n = buf.len().min(self.input.len()).min(self.per_read.max(1));
            for b in buf.iter_mut().take(n) {
                *b = self.input.pop_front().unwrap();
            }
            Ok(n)
        }
    }

    impl Write for Pipe {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.output.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// A server session and a client that trusts it.
    fn session_and_client() -> (Session, rustls::ClientConnection) {
        let dir = std::env::temp_dir().join(format!(
            "hotpath-tls-session-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = pair(&dir, "s");
        let tls = Tls::new(&cfg).unwrap();
        let (certs, _) = load_pair(&cfg).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let mut roots = rustls::RootCertStore::empty();
        roots.add(certs[0].clone()).unwrap();
        #[allow(deprecated)]
        let cc = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let client =
            rustls::ClientConnection::new(Arc::new(cc), "localhost".try_into().unwrap()).unwrap();
        (Session::new(tls.config()).unwrap(), client)
    }

    /// Moves what the client has to send into the server's input, and what the server sent
    /// to the client; reads the server side into `got` as the worker does.
    fn exchange(
        s: &mut Session,
        pipe: &mut Pipe,
        client: &mut rustls::ClientConnection,
        buf_len: usize,
        got: &mut Vec<u8>,
    ) -> io::Result<()> {
        let mut wire = Vec::new();
        while client.wants_write() {
            client.write_tls(&mut wire).unwrap();
        }
        pipe.input.extend(wire);
        let mut buf = vec![0u8; buf_len];
        loop {
            match s.read(pipe, &mut buf) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        let sent = std::mem::take(&mut pipe.output);
        let mut wire = &sent[..];
        while !wire.is_empty() {
            client.read_tls(&mut wire).unwrap();
            client.process_new_packets().unwrap();
        }
        Ok(())
    }

    #[test]
    fn a_session_carries_data_both_ways_through_small_reads_and_buffers() {
        let (mut s, mut client) = session_and_client();
        let mut pipe = Pipe {
            per_read: 7,
            ..Pipe::default()
        };
        let mut got = Vec::new();
        for _ in 0..10 {
            exchange(&mut s, &mut pipe, &mut client, 100, &mut got).unwrap();
            if !client.is_handshaking() && !s.is_handshaking() {
                break;
            }
        }
        assert!(!s.is_handshaking() && !client.is_handshaking());
        assert_eq!(s.handshake_kind(), Some(rustls::HandshakeKind::Full));
        // 40 KB from the client (three records) read through a 100-byte buffer: what does
        // not fit waits, nothing is lost.
        let request: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8).collect();
        std::io::Write::write_all(&mut client.writer(), &request).unwrap();
        exchange(&mut s, &mut pipe, &mut client, 100, &mut got).unwrap();
        assert_eq!(got, request);
        // 50 KB back, a record at a time.
        let answer: Vec<u8> = (0..50_000u32).map(|i| (i % 241) as u8).collect();
        let mut at = 0;
        while at < answer.len() {
            let n = s.encrypt(&answer[at..]).unwrap();
            assert!(n > 0 && n <= CHUNK);
            at += n;
            assert!(s.wants_write());
            assert!(s.send(&mut pipe).unwrap());
        }
        let mut wire = &pipe.output[..];
        let mut back = Vec::new();
        while !wire.is_empty() {
            client.read_tls(&mut wire).unwrap();
            client.process_new_packets().unwrap();
            let _ = std::io::Read::read_to_end(&mut client.reader(), &mut back);
        }
        assert_eq!(back, answer);
        pipe.output.clear();
        // Waiting, it holds no buffer.
        s.give_back();
        assert_eq!(s.footprint(), 0);
        // The client's close_notify is the end; the server's goes back.
        client.send_close_notify();
        let mut got = Vec::new();
        exchange(&mut s, &mut pipe, &mut client, 100, &mut got).unwrap();
        assert!(got.is_empty());
        s.close_notify();
        s.send(&mut pipe).unwrap();
        client.read_tls(&mut &pipe.output[..]).unwrap();
        client.process_new_packets().unwrap();
        assert!(client.process_new_packets().unwrap().peer_has_closed());
    }

    #[test]
    fn an_oversized_handshake_message_is_refused_within_the_buffer_bound() {
        let (mut s, _) = session_and_client();
        // Handshake records (type 22) carrying the start of a 16 MB ClientHello, then more
        // records of it: the session refuses it, holding 64 KiB and one record at most.
        let mut pipe = Pipe::whole();
        let mut first = vec![22, 3, 1, 0x40, 0x00, 1, 0xff, 0xff, 0xff];
        first.resize(5 + 0x4000, 0);
        pipe.input.extend(first);
        for _ in 0..8 {
            let mut more = vec![22, 3, 1, 0x40, 0x00];
            more.resize(5 + 0x4000, 0);
            pipe.input.extend(more);
        }
        let mut buf = [0u8; 100];
        let e = s.read(&mut pipe, &mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
        assert!(s.footprint() <= MAX_IN + 2_048, "{}", s.footprint());
        // Refused for good, with an alert sent.
        assert!(s.read(&mut pipe, &mut buf).is_err());
        assert!(s.encrypt(b"x").is_err());
        assert!(pipe.output.len() < 100);
    }

    #[test]
    fn garbage_is_refused_with_an_alert_and_the_session_stays_refused() {
        let (mut s, _) = session_and_client();
        let mut pipe = Pipe::whole();
        pipe.input
            .extend(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".iter().copied());
        pipe.input.extend([0xffu8; 64]);
        let mut buf = [0u8; 100];
        let e = s.read(&mut pipe, &mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        // An alert record (type 21) went out.
        assert_eq!(pipe.output.first(), Some(&21), "{:?}", pipe.output);
        assert!(s.read(&mut pipe, &mut buf).is_err());
        s.close_notify();
    }
}
