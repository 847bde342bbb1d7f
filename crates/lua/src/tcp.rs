//! `hp.tcp.request`: a request and its answer over TCP, off the worker. The script's
//! coroutine yields, the worker parks the HTTP request and serves others, and the worker's
//! TCP thread does the exchange over a pooled connection to that remote (kept open and reused,
//! closed after an idle time), then wakes the worker, which resumes the script with the answer.
//! Requests waiting for the TCP thread are capped; beyond the cap a request fails at once.

use hotpath_metrics::Counter;
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hotpath_service::Wake;
use parking_lot::Mutex;

/// The largest answer read.
pub const MAX_ANSWER: usize = 1 << 20;

/// How an answer ends.
#[derive(Debug, Clone)]
pub enum Until {
    /// At this byte string (included in the answer).
    Delimiter(Vec<u8>),
    /// After this many bytes.
    Bytes(usize),
}

/// One exchange.
pub struct Job {
    /// The worker's number for it.
    pub id: u64,
    /// Where.
    pub to: SocketAddr,
    /// What to send.
    pub data: Vec<u8>,
    /// How the answer ends.
    pub until: Until,
    /// For the whole exchange.
    pub timeout: Duration,
}

/// The TCP counters, shared by all workers.
#[derive(Default)]
pub struct TcpCounters {
    /// Exchanges that got their answer.
    pub ok: Counter,
    /// Exchanges that failed (refused, reset, closed early, answer too long).
    pub errors: Counter,
    /// Exchanges past their timeout.
    pub timeouts: Counter,
    /// Requests refused because too many waited already.
    pub refused: Counter,
    /// Connections opened.
    pub opened: Counter,
}

/// Results by job id, filled by the TCP thread.
pub type Results = Arc<Mutex<HashMap<u64, Result<Vec<u8>, String>>>>;

/// The pool's settings.
#[derive(Debug, Clone, Copy)]
pub struct PoolSettings {
    /// Idle connections kept per remote.
    pub max_idle: usize,
    /// How long an idle connection is kept.
    pub idle: Duration,
    /// Requests that may wait for the TCP thread at once.
    pub max_waiting: usize,
}

struct Idle {
    conn: TcpStream,
    since: Instant,
}

fn run(
    rx: Receiver<Job>,
    settings: PoolSettings,
    results: Results,
    waiting: Arc<AtomicUsize>,
    wake: Arc<Mutex<Option<Wake>>>,
    c: Arc<TcpCounters>,
) {
    let mut pool: HashMap<SocketAddr, Vec<Idle>> = HashMap::new();
    // Ends when the worker (and its sender) is gone.
    while let Ok(job) = rx.recv() {
        let now = Instant::now();
        pool.retain(|_, conns| {
            conns.retain(|i| now.duration_since(i.since) < settings.idle);
            !conns.is_empty()
        });
        let deadline = now + job.timeout;
        let result = exchange(&mut pool, &job, deadline, settings, &c);
        match &result {
            Ok(_) => c.ok.add(1),
            Err(e) if e.contains("timed out") => c.timeouts.add(1),
            Err(_) => c.errors.add(1),
        };
        results.lock().insert(job.id, result);
        waiting.fetch_sub(1, Ordering::AcqRel);
        if let Some(w) = wake.lock().as_ref() {
            w();
        }
    }
}

fn exchange(
    pool: &mut HashMap<SocketAddr, Vec<Idle>>,
    job: &Job,
    deadline: Instant,
    settings: PoolSettings,
    c: &TcpCounters,
) -> Result<Vec<u8>, String> {
    let to = job.to;
    let err = |e: io::Error| {
        if matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ) {
            format!("{to}: timed out")
        } else {
            format!("{to}: {e}")
        }
    };
    // A pooled connection the remote may have closed meanwhile: one more try on a new one.
    let reused = pool.get_mut(&to).and_then(|v| v.pop()).map(|i| i.conn);
    let tries = if reused.is_some() { 2 } else { 1 };
    let mut conn = reused;
    for attempt in 0..tries {
        let mut s = match conn.take() {
            Some(s) => s,
            None => {
                let left = deadline
                    .checked_duration_since(Instant::now())
                    .filter(|d| !d.is_zero())
                    .ok_or_else(|| format!("{to}: timed out"))?;
                let s = TcpStream::connect_timeout(&to, left).map_err(err)?;
                let _ = s.set_nodelay(true);
                c.opened.add(1);
                s
            }
        };
        match send_and_read(&mut s, job, deadline) {
            Ok(answer) => {
                let idle = pool.entry(to).or_default();
                if idle.len() < settings.max_idle {
                    idle.push(Idle {
                        conn: s,
                        since: Instant::now(),
                    });
                }
                return Ok(answer);
            }
            // Closed or reset before any answer on a reused connection: try a new one.
            Err((e, false)) if attempt + 1 < tries => {
                let _ = e;
            }
            Err((e, _)) => return Err(err(e)),
        }
    }
    Err(format!("{to}: closed"))
}

/// Sends and reads the answer; on error, whether any answer byte had come.
fn send_and_read(
    s: &mut TcpStream,
    job: &Job,
    deadline: Instant,
) -> Result<Vec<u8>, (io::Error, bool)> {
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| (io::Error::from(io::ErrorKind::TimedOut), true))
    };
    s.set_write_timeout(Some(left()?)).map_err(|e| (e, false))?;
    s.write_all(&job.data).map_err(|e| (e, false))?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 16 << 10];
    // Where the search for the delimiter goes on from (what was searched holds none).
    let mut searched = 0;
    loop {
        match &job.until {
            Until::Bytes(n) if answer.len() >= *n => {
                answer.truncate(*n);
                return Ok(answer);
            }
            Until::Delimiter(d) if !d.is_empty() && answer.len() >= d.len() => {
                if let Some(at) = answer[searched..]
                    .windows(d.len())
                    .position(|w| w == &d[..])
                {
                    answer.truncate(searched + at + d.len());
                    return Ok(answer);
                }
                searched = answer.len() + 1 - d.len();
            }
            _ => {}
        }
        if answer.len() > MAX_ANSWER {
            return Err((
                io::Error::new(io::ErrorKind::InvalidData, "answer longer than 1 MiB"),
                true,
            ));
        }
        s.set_read_timeout(Some(left()?)).map_err(|e| (e, true))?;
        match s.read(&mut buf) {
            Ok(0) => {
                return Err((
                    io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "closed before the answer ended",
                    ),
                    !answer.is_empty(),
                ))
            }
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                let started = !answer.is_empty()
                    || matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    );
                return Err((e, started));
            }
        }
    }
}

/// A worker's TCP side: its thread (started on first use) and the results it hands back.
pub struct TcpHandle {
    jobs: Option<Sender<Job>>,
    results: Results,
    waiting: Arc<AtomicUsize>,
    next_id: u64,
    index: usize,
    settings: PoolSettings,
    /// How the TCP thread wakes the worker (set when the server hands it over).
    pub wake: Arc<Mutex<Option<Wake>>>,
    counters: Arc<TcpCounters>,
    /// The timeout of an exchange that names none.
    pub timeout: Duration,
}

impl TcpHandle {
    /// Worker `index`'s handle.
    pub fn new(
        index: usize,
        settings: PoolSettings,
        counters: Arc<TcpCounters>,
        timeout: Duration,
    ) -> TcpHandle {
        TcpHandle {
            jobs: None,
            results: Arc::default(),
            waiting: Arc::default(),
            next_id: 0,
            index,
            settings,
            wake: Arc::default(),
            counters,
            timeout,
        }
    }

    /// Queues an exchange; its id, or why it cannot wait.
    pub fn submit(
        &mut self,
        to: SocketAddr,
        data: Vec<u8>,
        until: Until,
        timeout: Duration,
    ) -> Result<u64, String> {
        let max = self.settings.max_waiting;
        if self.waiting.load(Ordering::Acquire) >= max {
            self.counters.refused.add(1);
            return Err(format!(
                "too many requests wait for TCP already ({max}; lua.tcp_max_waiting)"
            ));
        }
        let jobs = match &self.jobs {
            Some(jobs) => jobs,
            None => {
                let (tx, rx) = mpsc::channel();
                let (r, w, c) = (
                    self.results.clone(),
                    self.waiting.clone(),
                    self.counters.clone(),
                );
                let (settings, wake) = (self.settings, self.wake.clone());
                std::thread::Builder::new()
                    .name(format!("lua-tcp-{}", self.index))
                    .spawn(move || run(rx, settings, r, w, wake, c))
                    .map_err(|e| format!("cannot start the TCP thread: {e}"))?;
                self.jobs.insert(tx)
            }
        };
        self.next_id += 1;
        let id = self.next_id;
        self.waiting.fetch_add(1, Ordering::AcqRel);
        let job = Job {
            id,
            to,
            data,
            until,
            timeout,
        };
        if jobs.send(job).is_err() {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            return Err("the TCP thread is gone".into());
        }
        Ok(id)
    }

    /// The result of exchange `id`, once done.
    pub fn take(&self, id: u64) -> Option<Result<Vec<u8>, String>> {
        self.results.lock().remove(&id)
    }
}
