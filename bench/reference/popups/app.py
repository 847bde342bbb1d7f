"""The popup report's architecture, as a reference to measure hotpath against: a Flask app
served by uWSGI, popups and per-user state cached in Redis, shows/clicks/closes pushed onto a
Redis list that consumer.py drains into MySQL in batches. Same API and the same tables as
hotpath's popup service (hp_popups, hp_popup_users, hp_popup_events, hp_popup_daily).

Differences, each in the reference's favour: show tokens are not verified (hotpath checks a
keyed SipHash; pure Python would pay much more for it), and the rollout hash is CRC-32.
"""

import json
import os
import time
import zlib

import pymysql
import redis
from flask import Flask, Response, request

R = redis.Redis(unix_socket_path=os.environ["REDIS_SOCKET"])
DB = dict(host="127.0.0.1", port=3306, user="root", password="", database=os.environ["DB"])
QUEUE = "popup_events"
USER_TTL = 86400
NEVER = 2**63 - 1
SHOWN, CLICK, CLOSE = 1, 2, 3

app = Flask(__name__)
_db = None
_catalog = {"at": 0.0, "popups": [], "by_id": {}}


def db():
    global _db
    if _db is None:
        _db = pymysql.connect(autocommit=True, **DB)
    return _db


def catalog():
    """Popups from Redis (put there from MySQL by the runner), re-read once a second."""
    now = time.time()
    if now - _catalog["at"] > 1.0:
        raw = R.get("popups")
        popups = json.loads(raw) if raw else []
        popups.sort(key=lambda p: (-p.get("priority", 0), p["id"]))
        _catalog.update(at=now, popups=popups, by_id={p["id"]: p for p in popups})
    return _catalog


def error(status, message):
    return Response(json.dumps({"error": message}) + "\n", status=status, mimetype="application/json")


def user_state(user):
    """The user's state per popup id: Redis, or MySQL on a miss (then cached, also when empty)."""
    key = f"u:{user}"
    raw = R.hgetall(key)
    if not raw:
        with db().cursor() as c:
            c.execute("SELECT popup_id, next_eligible, shows, last_action FROM hp_popup_users "
                      "WHERE user_id = %s", (user,))
            rows = c.fetchall()
        raw = {b"_": b"1"}
        for popup, nxt, shows, action in rows:
            raw[str(popup).encode()] = f"{nxt},{shows},{action}".encode()
        pipe = R.pipeline(transaction=False)
        pipe.hset(key, mapping=raw)
        pipe.expire(key, USER_TTL)
        pipe.execute()
    state = {}
    for k, v in raw.items():
        if k != b"_":
            nxt, shows, action = v.decode().split(",")
            state[int(k)] = [int(nxt), int(shows), int(action)]
    return state


def admits(flt, value):
    inc, exc = flt.get("include", []), flt.get("exclude", [])
    if value is None:
        return not inc
    return (not inc or value in inc) and value not in exc


def version(text):
    parts = [int(x) for x in text.split(".")] + [0, 0]
    return parts[:3]


def targeted(p, platform, country, app_version, segments):
    t = p.get("targeting", {})
    lo, hi = t.get("app_version_min"), t.get("app_version_max")
    if lo or hi:
        if app_version is None:
            return False
        if lo and app_version < version(lo) or hi and app_version > version(hi):
            return False
    if not admits(t.get("platform", {}), platform) or not admits(t.get("country", {}), country):
        return False
    seg = t.get("segment", {})
    inc, exc = seg.get("include", []), seg.get("exclude", [])
    if inc and not any(s in inc for s in segments):
        return False
    return not any(s in exc for s in segments)


def wait(value, now):
    return NEVER if value == "never" else now + int(value)


@app.route("/v1/popup")
def decide():
    user = request.args.get("user", "")
    if not user:
        return error(400, "user: missing")
    if len(user.encode()) > 255:
        return error(400, "user: longer than 255 bytes")
    av = request.args.get("app_version")
    try:
        av = version(av) if av else None
    except ValueError:
        return error(400, "app_version: not a version")
    platform, country = request.args.get("platform"), request.args.get("country")
    segments = [s for v in request.args.getlist("segment") for s in v.split(",") if s]
    now = int(time.time())
    day = now // 86400
    cat = catalog()
    state = user_state(user)
    capped = [p["id"] for p in cat["popups"] if p.get("frequency", {}).get("daily_cap")]
    today = dict(zip(capped, R.mget([f"daily:{i}:{day}" for i in capped]))) if capped else {}
    for p in cat["popups"]:
        f = p.get("frequency", {})
        if not p.get("enabled", True):
            continue
        if p.get("starts_at") and now < p["starts_at"] or p.get("ends_at") and now >= p["ends_at"]:
            continue
        if not targeted(p, platform, country, av, segments):
            continue
        if zlib.crc32(f"{p['id']}:{user}".encode()) % 100 >= p.get("rollout_percent", 100):
            continue
        cap = f.get("daily_cap")
        if cap and int(today.get(p["id"]) or 0) >= cap:
            continue
        seen = state.get(p["id"])
        if seen and (now < seen[0] or f.get("max_shows") and seen[1] >= f["max_shows"]):
            continue
        shows = (seen[1] if seen else 0) + 1
        nxt = wait(f.get("cooldown", 86400), now)
        pipe = R.pipeline(transaction=False)
        pipe.hset(f"u:{user}", str(p["id"]), f"{nxt},{shows},{SHOWN}")
        pipe.incr(f"daily:{p['id']}:{day}")
        pipe.rpush(QUEUE, json.dumps([SHOWN, now, user, p["id"], nxt, shows]))
        pipe.execute()
        pid = p["id"]
        token = "%x.%016x" % (now, zlib.crc32(f"{user}:{pid}:{now}".encode()))
        body = json.dumps({"id": pid, "payload": p["payload"], "token": token})
        return Response(body + "\n", mimetype="application/json", headers={"Cache-Control": "no-store"})
    return Response(status=204, headers={"Cache-Control": "no-store"})


@app.route("/v1/popup/events", methods=["POST"])
def event():
    try:
        e = json.loads(request.get_data())
    except ValueError as err:
        return error(400, f"body: invalid JSON: {err}")
    if not isinstance(e, dict) or set(e) != {"user", "popup", "action", "token"}:
        return error(400, "body: want user, popup, action, token")
    user, popup, action = e["user"], e["popup"], e["action"]
    if not isinstance(user, str) or not user or not isinstance(popup, int) or not e["token"]:
        return error(400, "body: bad user, popup or token")
    if action not in ("click", "close"):
        return error(400, 'action: must be "click" or "close"')
    p = catalog()["by_id"].get(popup)
    if p is None:
        return error(404, f"popup: no popup {popup}")
    now = int(time.time())
    f = p.get("frequency", {})
    seen = user_state(user).get(popup) or [0, 0, 0]
    code = CLICK if action == "click" else CLOSE
    nxt = wait(f.get("after_click" if code == CLICK else "after_close", 86400), now)
    pipe = R.pipeline(transaction=False)
    pipe.hset(f"u:{user}", str(popup), f"{nxt},{seen[1]},{code}")
    pipe.rpush(QUEUE, json.dumps([code, now, user, popup, nxt, seen[1]]))
    pipe.execute()
    return Response('{"accepted":true}\n', status=202, mimetype="application/json")


@app.route("/healthz")
def healthz():
    return Response('{"status":"ok"}', mimetype="application/json")
