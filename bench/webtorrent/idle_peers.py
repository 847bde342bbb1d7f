#!/usr/bin/env python3
"""Opens N WebSocket connections to a WebTorrent tracker, each announcing one peer (no offers),
and keeps them open and silent until its standard input closes: the tracker's memory per
connected idle peer is then read from its RSS. Connections come from several loopback source
addresses (one address has fewer ephemeral ports than 50,000 connections need).

Usage: idle_peers.py URL N [--torrents T] [--sources S]
Prints one JSON line when every peer is announced: {"connected": N, "seconds": ...}.
"""
import argparse, asyncio, base64, json, os, ssl, sys, time


def frame(text: bytes) -> bytes:
    mask = os.urandom(4)
    n = len(text)
    head = bytes([0x81])
    if n < 126:
        head += bytes([0x80 | n])
    else:
        head += bytes([0x80 | 126]) + n.to_bytes(2, "big")
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(text))


def binary_string(b: bytes) -> str:
    return "".join(chr(x) for x in b)


async def one(i, host, port, path, tls, source, torrents, done):
    reader, writer = await asyncio.open_connection(
        host, port, ssl=tls, local_addr=(source, 0), server_hostname=host if tls else None)
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write((f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
                  f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                  f"Sec-WebSocket-Version: 13\r\n\r\n").encode())
    head = await reader.readuntil(b"\r\n\r\n")
    if b" 101 " not in head.split(b"\r\n")[0]:
        raise RuntimeError(head.decode(errors="replace"))
    info_hash = (i % torrents).to_bytes(4, "big") + b"\x00" * 16
    peer_id = b"-HP0001-" + i.to_bytes(12, "big")
    msg = {"action": "announce", "info_hash": binary_string(info_hash),
           "peer_id": binary_string(peer_id), "numwant": 0, "uploaded": 0,
           "downloaded": 0, "left": 0 if i % 4 == 0 else 1000, "event": "started",
           "offers": []}
    writer.write(frame(json.dumps(msg).encode()))
    await writer.drain()
    # The announce's answer (a text frame): read its header and payload.
    b0, b1 = await reader.readexactly(2)
    n = b1 & 0x7F
    if n == 126:
        n = int.from_bytes(await reader.readexactly(2), "big")
    await reader.readexactly(n)
    done.append(1)
    return reader, writer


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("n", type=int)
    ap.add_argument("--torrents", type=int, default=1000)
    ap.add_argument("--sources", type=int, default=4)
    ap.add_argument("--parallel", type=int, default=500)
    a = ap.parse_args()
    scheme, rest = a.url.split("://", 1)
    hostport, _, path = rest.partition("/")
    host, port = hostport.rsplit(":", 1)
    tls = None
    if scheme == "wss":
        tls = ssl.create_default_context()
        tls.check_hostname = False
        tls.verify_mode = ssl.CERT_NONE
    started = time.time()
    done = []
    conns = []
    sem = asyncio.Semaphore(a.parallel)

    async def guarded(i):
        async with sem:
            source = f"127.0.0.{1 + i % a.sources}"
            return await one(i, host, int(port), "/" + path, tls, source, a.torrents, done)

    for start in range(0, a.n, 5000):
        batch = await asyncio.gather(*(guarded(i) for i in range(start, min(a.n, start + 5000))))
        conns.extend(batch)
    print(json.dumps({"connected": len(done), "seconds": round(time.time() - started, 1)}),
          flush=True)
    # Silent until told to go (the tracker's pings are answered by nobody: keep the idle
    # timeout longer than the measurement).
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    for _, w in conns:
        w.close()


asyncio.run(main())
