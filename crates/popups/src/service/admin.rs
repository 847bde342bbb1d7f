//! The admin API: `/admin/popups…` behind a bearer token, and the thread that writes what it
//! saves (requests park until their answer is in).

use super::*;

impl Shared {
    /// The admin writer: saves popups and reads statistics, one job at a time.
    pub(super) fn run_admin(&self, stop: &AtomicBool) {
        let Some(rx) = self.admin_rx.lock().take() else {
            return;
        };
        while let Some(job) = self.next_job(&rx, stop) {
            let answer = match job.op {
                AdminOp::Save { popup, status } => self.save(*popup, status),
                AdminOp::Stats => self.stats_answer(),
            };
            self.admin_done
                .lock()
                .insert(job.key, (Instant::now(), answer));
            self.admin_busy.lock().remove(&job.key);
            self.wake(job.worker);
        }
    }

    pub(super) fn save(&self, popup: Popup, status: u16) -> Answer {
        let text = serde_json::to_string(&popup).expect("a popup serializes");
        let _held = self.catalog_lock.lock();
        let saved = if self.catalog_read.load(Ordering::Acquire) {
            self.store
                .read(|b| b.save_popup(popup.id, &text, hotpath_store::unix_now()))
                .map_err(|e| e.to_string())
        } else {
            // Published now, it would replace a catalog not read yet.
            Err(format!(
                "the popup catalog has not been read from {} since start",
                self.store.name
            ))
        };
        match saved {
            Ok(()) => {
                self.counters.admin_writes.add(1);
                let live = self.live.read().clone();
                let mut popups: Vec<Popup> = live
                    .catalog
                    .popups()
                    .iter()
                    .filter(|p| p.id != popup.id)
                    .cloned()
                    .collect();
                popups.push(popup);
                self.publish(popups);
                log::info!("popups: popup saved through the admin API: {text}");
                (status, text.into_bytes())
            }
            Err(e) => {
                let mut body = Vec::new();
                api::error_body(&mut body, &format!("not saved: {e}"));
                (503, body)
            }
        }
    }

    pub(super) fn stats_answer(&self) -> Answer {
        let counts = match self.store.popup_event_counts() {
            Ok(c) => c,
            Err(e) => {
                let mut body = Vec::new();
                api::error_body(&mut body, &format!("statistics unavailable: {e}"));
                return (503, body);
            }
        };
        let live = self.live.read().clone();
        let daily = self.daily.read();
        let rows: Vec<serde_json::Value> = live
            .sorted()
            .into_iter()
            .map(|p| {
                let n = |a| counts.get(&(p.id, a)).copied().unwrap_or(0);
                let (shows, clicks, closes) = (n(SHOWN), n(CLICK), n(CLOSE));
                serde_json::json!({
                    "id": p.id,
                    "name": p.name,
                    "enabled": p.enabled,
                    "shows": shows,
                    "clicks": clicks,
                    "closes": closes,
                    "ctr": if shows == 0 { 0.0 } else { clicks as f64 / shows as f64 },
                    "shows_today": daily.get(p.id),
                })
            })
            .collect();
        let body = serde_json::to_vec(&serde_json::json!({ "popups": rows })).expect("JSON");
        (200, body)
    }
}

impl PopupsWorker {
    /// `/admin/popups…`, behind the bearer token.
    pub(super) fn admin_api(
        &mut self,
        req: &Request<'_, '_>,
        ctx: &Context,
        resp: &mut HttpResponse,
    ) -> Option<Handled> {
        const K: Kind = Kind::ADMIN;
        let shared = self.shared.clone();
        let checked = hotpath_service::bearer(
            req,
            &shared.tunable.admin_token.read(),
            "popups.admin_token",
            resp,
            &shared.token_guesses,
            ctx,
        );
        if let Err(refused) = checked {
            return Some(refused);
        }
        // A parked write or statistics request, asked again: its answer is in.
        let key = job_key(self.index, ctx.peer, req);
        if let Some((_, (status, body))) = self.shared.admin_done.lock().remove(&key) {
            resp.status = status;
            resp.content_type = "application/json";
            resp.body = body;
            let outcome = if status < 400 {
                Outcome::Ok
            } else {
                Outcome::Refused
            };
            return Some(Handled::Answered(K, outcome));
        }
        self.refresh();
        let rest = req.path["/admin/popups".len()..].trim_start_matches('/');
        let mut parts = rest.splitn(2, '/');
        let first = parts.next().unwrap_or("");
        let second = parts.next();
        let id = first.parse::<u32>().ok();
        let json = |resp: &mut HttpResponse, status: u16, body: Vec<u8>| {
            resp.status = status;
            resp.content_type = "application/json";
            resp.body = body;
            Some(Handled::Answered(K, Outcome::Ok))
        };
        match (req.method, first, id, second) {
            ("GET", "", _, None) => {
                let list: Vec<&Popup> = self.live.sorted();
                let body =
                    serde_json::to_vec(&serde_json::json!({ "popups": list })).expect("JSON");
                json(resp, 200, body)
            }
            ("GET", "stats", _, None) => self.admin_job(key, resp, AdminOp::Stats),
            ("GET", _, Some(id), None) => match self.live.by_id.get(&id) {
                Some((text, _)) => json(resp, 200, text.clone().into_bytes()),
                None => refuse(resp, 404, K, &format!("no popup {id}")),
            },
            ("POST", "", _, None) => {
                let popup = match Popup::from_json(req.body) {
                    Ok(p) => p,
                    Err(e) => return refuse(resp, 400, K, &e),
                };
                if self.live.by_id.contains_key(&popup.id) {
                    let id = popup.id;
                    return refuse(
                        resp,
                        409,
                        K,
                        &format!("popup {id} exists; PUT /admin/popups/{id} replaces it"),
                    );
                }
                self.save_job(key, resp, popup, 201)
            }
            ("PUT", _, Some(id), None) => {
                let popup = match Popup::from_json(req.body) {
                    Ok(p) => p,
                    Err(e) => return refuse(resp, 400, K, &e),
                };
                if popup.id != id {
                    return refuse(
                        resp,
                        400,
                        K,
                        &format!("id: the body says {}, the path {id}", popup.id),
                    );
                }
                // 201 for a popup this PUT creates, 200 for one it replaces.
                let status = if self.live.by_id.contains_key(&id) {
                    200
                } else {
                    201
                };
                self.save_job(key, resp, popup, status)
            }
            ("POST", _, Some(id), Some("disable" | "enable")) => {
                let Some(p) = self.live.catalog.get(id) else {
                    return refuse(resp, 404, K, &format!("no popup {id}"));
                };
                let mut popup = p.clone();
                popup.enabled = second == Some("enable");
                self.save_job(key, resp, popup, 200)
            }
            _ => refuse(
                resp,
                404,
                K,
                "admin API: GET /admin/popups, GET /admin/popups/stats, GET|PUT /admin/popups/ID, \
                 POST /admin/popups, POST /admin/popups/ID/disable|enable",
            ),
        }
    }

    /// Saves `popup` on the admin thread; answers `status` once it is written.
    fn save_job(
        &mut self,
        key: u64,
        resp: &mut HttpResponse,
        popup: Popup,
        status: u16,
    ) -> Option<Handled> {
        let popup = Box::new(popup);
        self.admin_job(key, resp, AdminOp::Save { popup, status })
    }

    /// Runs an admin operation on the admin thread: the request parks until its answer is in
    /// (the same request, asked again, collects it).
    pub(super) fn admin_job(
        &mut self,
        key: u64,
        resp: &mut HttpResponse,
        op: AdminOp,
    ) -> Option<Handled> {
        if !self.shared.admin_busy.lock().insert(key) {
            return Some(Handled::Parked);
        }
        let job = AdminJob {
            key,
            worker: self.index,
            op,
        };
        match self.shared.admin.try_send(job) {
            Ok(()) => Some(Handled::Parked),
            Err(_) => {
                self.shared.admin_busy.lock().remove(&key);
                resp.extra_headers.extend_from_slice(b"Retry-After: 1\r\n");
                refuse(
                    resp,
                    503,
                    Kind::ADMIN,
                    "too many admin requests at once; retry",
                )
            }
        }
    }
}

/// Identifies one admin request across its parked retries: the same connection asking the
/// same thing.
pub(super) fn job_key(worker: usize, peer: SocketAddr, req: &Request<'_, '_>) -> u64 {
    let mut h = siphasher::sip::SipHasher13::new();
    h.write_usize(worker);
    h.write(peer.to_string().as_bytes());
    for part in [
        req.method.as_bytes(),
        req.path.as_bytes(),
        req.query,
        req.body,
    ] {
        h.write_usize(part.len());
        h.write(part);
    }
    h.finish()
}
