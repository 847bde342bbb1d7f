//! The decision and event endpoints, on each worker: answers from memory, changes through
//! the worker's journal, a user not in memory parked until the loader has them.

use super::*;

pub(super) fn seen_of(r: &PopupUserRow) -> Seen {
    Seen {
        next_eligible: r.next_eligible,
        shows: r.shows,
        last_action: match r.last_action {
            SHOWN => Action::Shown,
            CLICK => Action::Click,
            CLOSE => Action::Close,
            _ => Action::None,
        },
        clicked_show: r.clicked_show,
        closed_show: r.closed_show,
    }
}

pub(super) fn action_code(a: Action) -> u8 {
    match a {
        Action::Click => CLICK,
        Action::Close => CLOSE,
        _ => SHOWN,
    }
}

impl PopupsWorker {
    pub(super) fn refresh(&mut self) {
        let v = self.shared.version.load(Ordering::Acquire);
        if v != self.version {
            self.live = self.shared.live.read().clone();
            self.version = v;
        }
    }

    /// Queues a load of `user`; parks the request, or refuses it when the queue is full.
    pub(super) fn load(&self, user: &str, kind: Kind, resp: &mut HttpResponse) -> Option<Handled> {
        match self.shared.loads.try_send(user.into()) {
            Ok(()) => Some(Handled::Parked),
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.shared.users.cancel(user);
                self.shared.counters.load_busy.add(1);
                resp.extra_headers.extend_from_slice(b"Retry-After: 1\r\n");
                refuse(
                    resp,
                    503,
                    kind,
                    "too many users are being loaded at once; retry",
                )
            }
        }
    }

    /// A 503 when the store cannot take a change now (journal or queue at its bound).
    pub(super) fn no_room(&self, kind: Kind, resp: &mut HttpResponse) -> Option<Option<Handled>> {
        if self.journal.has_room(CHANGE_BYTES) {
            return None;
        }
        self.shared.counters.journal_full.add(1);
        resp.extra_headers.extend_from_slice(b"Retry-After: 5\r\n");
        Some(refuse(resp, 503, kind, self.journal.refuse()))
    }

    /// The answer for a user whose state is not in memory: park (queuing a load if none is
    /// under way), or an error while loads fail.
    pub(super) fn not_loaded<T>(
        &self,
        found: Found<T>,
        user: &str,
        kind: Kind,
        resp: &mut HttpResponse,
    ) -> Option<Handled> {
        match found {
            Found::Ready(_) => unreachable!("handled by the caller"),
            Found::Load => self.load(user, kind, resp),
            Found::Loading => Some(Handled::Parked),
            Found::Failed => {
                self.shared.counters.load_errors.add(1);
                resp.extra_headers.extend_from_slice(b"Retry-After: 1\r\n");
                refuse(
                    resp,
                    503,
                    kind,
                    "this user's state cannot be read from the database now; retry",
                )
            }
        }
    }

    /// `GET /v1/popup?user=…`.
    pub(super) fn decision(
        &mut self,
        req: &Request<'_, '_>,
        ctx: &Context,
        resp: &mut HttpResponse,
    ) -> Option<Handled> {
        const K: Kind = POPUP;
        if req.method != "GET" && req.method != "HEAD" {
            resp.extra_headers
                .extend_from_slice(b"Allow: GET, HEAD\r\n");
            return refuse(resp, 405, K, "use GET");
        }
        if let Err(e) = self.query.parse(req.query) {
            self.shared.counters.bad_requests.add(1);
            return refuse(resp, 400, K, e);
        }
        if let Some(refused) = self.no_room(K, resp) {
            return refused;
        }
        self.refresh();
        let shared = &*self.shared;
        let now = shared.unix(ctx.now);
        let live = &*self.live;
        let mut segs = [""; MAX_SEGMENTS];
        let viewer = self.query.viewer(&mut segs);
        let daily = shared.daily.read();
        let found = shared
            .users
            .with(viewer.user, self.index as u16, ctx.now, |state| {
                let mut capped: Vec<u32> = Vec::new();
                loop {
                    let chosen = live.catalog.choose(&viewer, now, &state.seen, |id| {
                        if capped.contains(&id) {
                            u64::MAX
                        } else {
                            daily.get(id)
                        }
                    });
                    let Some(p) = chosen else {
                        return (None, false);
                    };
                    if !daily.take(p.id, p.frequency.daily_cap) {
                        // Another worker took the last show of today's cap meanwhile.
                        capped.push(p.id);
                        continue;
                    }
                    let seen = state.entry(p.id);
                    decide::shown(seen, &p.frequency, now);
                    return (Some((p.id, *seen)), true);
                }
            });
        drop(daily);
        let chosen = match found {
            Found::Ready(chosen) => chosen,
            other => return self.not_loaded(other, self.query.user(), K, resp),
        };
        let c = &shared.counters;
        let Some((id, seen)) = chosen else {
            c.none.add(1);
            resp.status = 204;
            resp.extra_headers
                .extend_from_slice(b"Cache-Control: no-store\r\n");
            return Some(Handled::Answered(K, Outcome::Ok));
        };
        c.shown.add(1);
        let user = self.query.user();
        self.journal.push(&PopupChange {
            user,
            popup: id,
            action: SHOWN,
            next_eligible: seen.next_eligible,
            shows: seen.shows,
            at: now as u32,
            answers: 0,
        });
        resp.content_type = "application/json";
        resp.extra_headers
            .extend_from_slice(b"Cache-Control: no-store\r\n");
        let prefix = &self
            .live
            .by_id
            .get(&id)
            .expect("chosen from this catalog")
            .1;
        resp.body.extend_from_slice(prefix);
        shared.signer.sign(&mut resp.body, user, id, now);
        resp.body.extend_from_slice(b"\"}\n");
        Some(Handled::Answered(K, Outcome::Ok))
    }

    /// `POST /v1/popup/events`.
    pub(super) fn event(
        &mut self,
        req: &Request<'_, '_>,
        ctx: &Context,
        resp: &mut HttpResponse,
    ) -> Option<Handled> {
        const K: Kind = POPUP_EVENT;
        self.refresh();
        let c = &self.shared.counters;
        if req.method != "POST" {
            resp.extra_headers.extend_from_slice(b"Allow: POST\r\n");
            return refuse(resp, 405, K, "use POST with a JSON body");
        }
        if req.body.len() > api::MAX_EVENT_BYTES {
            c.bad_requests.add(1);
            return refuse(resp, 413, K, "body: larger than 4096 bytes");
        }
        let event = match Event::parse(req.body) {
            Ok(e) => e,
            Err(e) => {
                c.bad_requests.add(1);
                return refuse(resp, 400, K, &e);
            }
        };
        let Some(popup) = self.live.catalog.get(event.popup) else {
            c.bad_requests.add(1);
            return refuse(resp, 404, K, &format!("popup: no popup {}", event.popup));
        };
        let now = self.shared.unix(ctx.now);
        let shown_at = match self.shared.signer.verify(
            &event.token,
            &event.user,
            event.popup,
            now,
            self.shared.tunable.token_ttl_secs.load(Ordering::Relaxed),
        ) {
            Ok(at) => at,
            Err(e) => {
                c.bad_tokens.add(1);
                return refuse(resp, 403, K, e.message());
            }
        };
        if let Some(refused) = self.no_room(K, resp) {
            return refused;
        }
        let code = action_code(event.action);
        let frequency = popup.frequency;
        // A show yields one click and one close: the user's state says when they last clicked
        // and closed the popup, and it is journaled and stored with each answer, so a replay
        // is known whenever it comes (after a restart too), with no table of spent tokens.
        let found = self
            .shared
            .users
            .with(&event.user, self.index as u16, ctx.now, |state| {
                let seen = state.entry(event.popup);
                if seen.answered(event.action, shown_at) {
                    return (None, false);
                }
                decide::acted(seen, &frequency, event.action, now);
                decide::answered(seen, event.action, shown_at);
                (Some(*seen), true)
            });
        let seen = match found {
            Found::Ready(Some(seen)) => seen,
            Found::Ready(None) => {
                c.replays.add(1);
                let msg = match event.action {
                    Action::Click => "token: this show was already clicked",
                    _ => "token: this show was already closed",
                };
                return refuse(resp, 409, K, msg);
            }
            other => return self.not_loaded(other, &event.user, K, resp),
        };
        match event.action {
            Action::Click => c.clicks.add(1),
            _ => c.closes.add(1),
        }
        self.journal.push(&PopupChange {
            user: &*event.user,
            popup: event.popup,
            action: code,
            next_eligible: seen.next_eligible,
            shows: seen.shows,
            at: now as u32,
            answers: u32::try_from(shown_at).unwrap_or(u32::MAX),
        });
        resp.status = 202;
        resp.content_type = "application/json";
        resp.body.extend_from_slice(b"{\"accepted\":true}\n");
        Some(Handled::Answered(K, Outcome::Ok))
    }
}

impl ServiceWorker for PopupsWorker {
    fn http(
        &mut self,
        req: &Request<'_, '_>,
        ctx: &Context,
        resp: &mut HttpResponse,
    ) -> Option<Handled> {
        match req.path {
            "/v1/popup" => self.decision(req, ctx, resp),
            "/v1/popup/events" => self.event(req, ctx, resp),
            _ => None,
        }
    }

    /// The admin API, on the admin listener only (the public one answers 404 there).
    fn admin(
        &mut self,
        req: &Request<'_, '_>,
        ctx: &Context,
        resp: &mut HttpResponse,
    ) -> Option<Handled> {
        match req.path {
            p if p == "/admin/popups" || p.starts_with("/admin/popups/") => {
                self.admin_api(req, ctx, resp)
            }
            _ => None,
        }
    }

    fn set_wake(&mut self, wake: Wake) {
        self.shared.wakes.lock().insert(self.index, wake);
    }

    fn udp(&mut self, _: &[u8], _: &Context, _: &mut Vec<u8>) -> (Kind, Outcome) {
        (Kind::OTHER, Outcome::Dropped)
    }

    fn uncommitted(&self) -> bool {
        self.journal.uncommitted()
    }

    fn commit(&mut self) -> bool {
        self.journal.commit().is_ok()
    }
}
