#!/usr/bin/python3
"""Real BitTorrent clients meeting only through a hotpath tracker.

A seeder (a python3-libtorrent session, or Transmission's transmission-cli) seeds a generated
file; a leecher (a second libtorrent session, or aria2c) downloads it. DHT, local peer
discovery, PEX, UPnP and NAT-PMP are off, so the only way the leecher can learn of the seeder
is the tracker. (Transmission takes no loopback address from a tracker, so on loopback it can
only be the seeder: the leecher connects to it.) Succeeds (exit 0, one JSON line) when the
leecher holds a byte-identical copy; fails (exit 1, the reason) otherwise or after --timeout.
"""

import argparse
import hashlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import libtorrent as lt


def settings(port, ip="127.0.0.1"):
    return {
        "listen_interfaces": f"{ip}:{port}",
        # Announces and peer connections from this address (several clients, one host).
        "outgoing_interfaces": ip,
        "enable_dht": False,
        "enable_lsd": False,
        "enable_upnp": False,
        "enable_natpmp": False,
        "allow_multiple_connections_per_ip": True,
        "alert_mask": lt.alert.category_t.error_notification
        | lt.alert.category_t.tracker_notification
        | lt.alert.category_t.status_notification,
        "announce_to_all_trackers": True,
        "user_agent": "hotpath-test",
        # A loopback tracker whose path is not exactly /announce (a passkey in it) is taken
        # for a request forgery and blocked; these tests run on loopback only.
        "ssrf_mitigation": False,
        # Loopback peers must not be treated as "local" and skipped.
        "enable_incoming_utp": True,
        "enable_outgoing_utp": True,
    }


def session(port, ip="127.0.0.1"):
    # flags=0: no default plugins, so no ut_pex and no ut_metadata.
    try:
        return lt.session(settings(port, ip), 0)
    except TypeError:
        return lt.session(settings(port, ip))


def make_torrent(workdir, tracker, size):
    seed_dir = os.path.join(workdir, "seed")
    os.makedirs(seed_dir, exist_ok=True)
    path = os.path.join(seed_dir, "payload.bin")
    rng = random.Random(42)
    with open(path, "wb") as f:
        f.write(bytes(rng.getrandbits(8) for _ in range(size)))
    fs = lt.file_storage()
    lt.add_files(fs, path)
    # v1 only: aria2 does not speak BitTorrent v2 and hashes hybrid torrents differently.
    t = lt.create_torrent(fs, 32768, flags=lt.create_torrent.v1_only)
    t.add_tracker(tracker)
    t.set_creator("hotpath tests")
    lt.set_piece_hashes(t, seed_dir)
    torrent_path = os.path.join(workdir, "payload.torrent")
    with open(torrent_path, "wb") as f:
        f.write(lt.bencode(t.generate()))
    return seed_dir, path, torrent_path


def sha1(path):
    h = hashlib.sha1()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def drain(ses, log):
    for a in ses.pop_alerts():
        if isinstance(a, (lt.tracker_error_alert, lt.tracker_warning_alert, lt.tracker_reply_alert)):
            log.append(f"{type(a).__name__}: {a.message()}")


def wait_announced(ses, handle, deadline, log):
    while time.time() < deadline:
        for a in ses.pop_alerts():
            if isinstance(a, lt.tracker_reply_alert):
                return
            if isinstance(a, lt.tracker_error_alert):
                log.append(f"seeder tracker error: {a.message()}")
        time.sleep(0.1)
    raise SystemExit(fail("the seeder's announce got no tracker reply", log))


def scrape_downloaded(scrape_url, info_hash, deadline, key=b"downloaded"):
    """Polls the tracker's HTTP scrape until the torrent's `key` count (completed downloads,
    or seeders with b"complete") is at least 1."""
    url = scrape_url + ("&" if "?" in scrape_url else "?") + "info_hash=" \
        + urllib.parse.quote(info_hash)
    downloaded = 0
    while time.time() < deadline:
        with urllib.request.urlopen(url, timeout=5) as r:
            files = lt.bdecode(r.read()).get(b"files", {})
        downloaded = files.get(info_hash, {}).get(key, 0)
        if downloaded >= 1:
            break
        time.sleep(0.2)
    return downloaded


def free_port():
    """A TCP port free on loopback now (transmission-cli takes no port 0)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def transmission(workdir, torrent_path, seed_dir, port):
    """Starts transmission-cli seeding the payload in `seed_dir` (it verifies it first)."""
    conf = os.path.join(workdir, "transmission")
    os.makedirs(conf, exist_ok=True)
    with open(os.path.join(conf, "settings.json"), "w") as f:
        json.dump({
            "dht-enabled": False, "lpd-enabled": False, "pex-enabled": False,
            "port-forwarding-enabled": False, "blocklist-enabled": False,
            "peer-port": port, "peer-port-random-on-start": False,
            "bind-address-ipv4": "127.0.0.1", "download-dir": seed_dir,
            "incomplete-dir-enabled": False, "encryption": 1,
        }, f)
    out = open(os.path.join(workdir, "transmission.log"), "wb")
    return subprocess.Popen(
        ["transmission-cli", "-g", conf, "-w", seed_dir, "-M", "-B", "-p", str(port),
         torrent_path],
        stdout=out, stderr=subprocess.STDOUT)


def stop_transmission(proc, workdir, log):
    """SIGINT, and the log kept. (transmission-cli 3.00 quits without a stopped announce:
    its final counters reach the tracker only with a regular announce, see --final-wait.)
    Returns why it failed, or None."""
    err = None
    if proc.poll() is not None:
        err = f"transmission-cli exited {proc.returncode}"
    else:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            err = "transmission-cli did not stop on SIGINT"
    with open(os.path.join(workdir, "transmission.log"), "rb") as f:
        text = f.read().decode("utf-8", "replace").replace("\r", "\n")
    log.append("\n".join(l for l in text.splitlines() if not l.startswith("Progress"))[-2000:])
    return err


def announce_now(clients, deadline, log):
    """Has each (name, session, handle) announce now, inside the tracker's min interval, and
    waits for the replies; returns each one's counters (payload, as it reports them) before
    it announced and after the reply: what it sent lies between (the transfer goes on)."""
    counters = {}
    for name, ses, h in clients:
        drain(ses, log)
        before = h.status()
        h.force_reannounce(0, -1, lt.reannounce_flags_t.ignore_min_interval)
        wait_announced(ses, h, deadline, log)
        after = h.status()
        counters[name] = {
            "uploaded": [before.total_payload_upload, after.total_payload_upload],
            "downloaded": [before.total_payload_download, after.total_payload_download],
        }
    return counters


def wait_line(deadline):
    """A line from standard input, or None at the deadline."""
    import select
    while time.time() < deadline:
        ready, _, _ = select.select([sys.stdin], [], [], 0.2)
        if ready:
            return sys.stdin.readline()
    return None


def fail(reason, log):
    print(json.dumps({"ok": False, "reason": reason, "log": log[-20:]}))
    return 1


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tracker", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--scrape", required=True, help="the tracker's HTTP scrape URL")
    p.add_argument("--leecher", choices=["libtorrent", "aria2"], default="libtorrent")
    p.add_argument("--seeder", choices=["libtorrent", "transmission"], default="libtorrent")
    p.add_argument("--size", type=int, default=1 << 20)
    p.add_argument("--timeout", type=float, default=90)
    p.add_argument("--seed-port", type=int, default=0)
    p.add_argument("--seed-ip", default="127.0.0.1", help="the seeder's address")
    p.add_argument("--leech-ip", default="127.0.0.1", help="the leecher's address")
    p.add_argument("--leech-port", type=int, default=0)
    p.add_argument("--leech-tracker", help="the leecher's tracker URL (another passkey), "
                   "in place of the torrent's")
    p.add_argument("--hash-only", action="store_true",
                   help="print the info hash of the payload's torrent and stop")
    p.add_argument("--final-wait", type=float, default=0,
                   help="with a Transmission seeder and --reannounce, seconds to keep it "
                   "running after the download, for a regular announce (the tracker's "
                   "interval) to carry its final counters")
    p.add_argument("--rate", type=int, default=0,
                   help="the libtorrent leecher's download limit, bytes per second")
    p.add_argument("--pause-at", type=float, default=0,
                   help="when the libtorrent leecher has this fraction, both clients "
                   "announce and their counters are printed as a line {\"mid\": ...}; then, "
                   "after a line on standard input (the tracker was restarted), both "
                   "announce again and the result reports those counters as \"restart\"")
    p.add_argument("--reannounce", action="store_true",
                   help="after the download, have both clients announce their final "
                   "counters and report them")
    args = p.parse_args()
    deadline = time.time() + args.timeout
    log = []

    seed_dir, payload, torrent_path = make_torrent(args.workdir, args.tracker, args.size)
    info = lt.torrent_info(torrent_path)
    if args.hash_only:
        # The payload is seeded with a fixed seed: the same size gives the same info hash.
        print(json.dumps({"ok": True, "info_hash": str(info.info_hashes().v1)}))
        return 0

    v1 = info.info_hashes().v1.to_bytes()
    seeder = sh = tr = None
    if args.seeder == "transmission":
        tr = transmission(args.workdir, torrent_path, seed_dir, args.seed_port or free_port())
        try:
            code = swarm(args, info, v1, payload, torrent_path, tr, None, None, deadline, log)
            if code == 0 and args.reannounce:
                time.sleep(min(args.final_wait, max(0, deadline - time.time())))
            return code
        finally:
            err = stop_transmission(tr, args.workdir, log)
            if err:
                log.append(err)
    seeder = session(args.seed_port, args.seed_ip)
    sh = seeder.add_torrent({"ti": info, "save_path": seed_dir})
    sh.force_recheck()
    while not sh.status().is_seeding:
        if time.time() > deadline:
            return fail("the seeder never finished checking its file", log)
        time.sleep(0.1)
    sh.force_reannounce()
    wait_announced(seeder, sh, deadline, log)
    return swarm(args, info, v1, payload, torrent_path, None, seeder, sh, deadline, log)


def swarm(args, info, v1, payload, torrent_path, tr, seeder, sh, deadline, log):
    """The leecher's part, once the seeder is in the swarm; prints the result line."""
    paused = {}
    if tr is not None:
        # Seeding once it has checked its file and announced: the tracker counts a seeder.
        if scrape_downloaded(args.scrape, v1, deadline, b"complete") < 1:
            return fail("the tracker never counted Transmission as a seeder", log)

    leech_dir = os.path.join(args.workdir, "leech")
    os.makedirs(leech_dir, exist_ok=True)
    got = os.path.join(leech_dir, os.path.basename(payload))
    if args.leecher == "libtorrent":
        leecher = session(args.leech_port, args.leech_ip)
        lh = leecher.add_torrent({"ti": info, "save_path": leech_dir})
        if args.rate:
            # On the torrent: the session's limit spares loopback peers (their own class).
            lh.set_download_limit(args.rate)
        if args.leech_tracker:
            lh.replace_trackers([lt.announce_entry(args.leech_tracker)])
            lh.force_reannounce()
        pair = [("seeder", seeder, sh), ("leecher", leecher, lh)]
        while not lh.status().is_seeding:
            if args.pause_at and "mid" not in paused \
                    and lh.status().progress >= args.pause_at:
                paused["mid"] = announce_now(pair, deadline, log)
                print(json.dumps({"mid": paused["mid"]}), flush=True)
                if wait_line(deadline) is None:
                    return fail("no word that the tracker is back", log)
                paused["restart"] = announce_now(pair, deadline, log)
            drain(leecher, log)
            if seeder is not None:
                drain(seeder, log)
            if time.time() > deadline:
                s = lh.status()
                return fail(f"the leecher stalled at {s.progress:.0%} with {s.num_peers} peers", log)
            time.sleep(0.2)
    else:
        cmd = [
            "aria2c", "--enable-dht=false", "--enable-dht6=false", "--bt-enable-lpd=false",
            "--enable-peer-exchange=false", "--seed-time=0", "--check-integrity=true",
            "--file-allocation=none", "--summary-interval=0", "--console-log-level=warn",
            f"--listen-port={args.leech_port or 6891}", "--bt-tracker-interval=5",
            f"--dir={leech_dir}", torrent_path,
        ]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True,
                                  timeout=max(1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            return fail("aria2c did not finish in time", log)
        log.append(done.stdout[-2000:])
        log.append(done.stderr[-2000:])
        if done.returncode != 0:
            return fail(f"aria2c exited {done.returncode}", log)

    if not os.path.exists(got) or sha1(got) != sha1(payload):
        return fail("the downloaded file differs from the seeded one", log)
    # The seeder is still in the swarm, so the torrent (and its snatch count) is still tracked.
    downloaded = scrape_downloaded(args.scrape, v1, deadline)
    if downloaded < 1:
        return fail("the tracker never counted the completed download", log)
    counters = {}
    if args.reannounce and args.leecher == "libtorrent":
        # Each client's counters reach the tracker with its next announce.
        clients = [("leecher", leecher, lh)]
        if seeder is not None:
            clients.insert(0, ("seeder", seeder, sh))
        for name, ses, h in clients:
            drain(ses, log)
            # Inside the tracker's min interval: libtorrent waits unless told not to.
            h.force_reannounce(0, -1, lt.reannounce_flags_t.ignore_min_interval)
            wait_announced(ses, h, deadline, log)
            st = h.status()
            counters[name] = {"uploaded": st.total_payload_upload,
                              "downloaded": st.total_payload_download}
    print(json.dumps({
        "ok": True,
        "counters": counters,
        **paused,
        "leecher": args.leecher,
        "seeder": args.seeder,
        "bytes": args.size,
        "sha1": sha1(got),
        "info_hash": str(info.info_hashes().v1),
        "downloaded": downloaded,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
