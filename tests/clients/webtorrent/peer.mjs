// A WebTorrent client in node for the tests: `seed ANNOUNCE FILE` seeds FILE and prints the
// magnet link (one JSON line), then seeds until its standard input closes; `get ANNOUNCE
// MAGNET DIR` downloads into DIR, prints the file's name and length (one JSON line) and exits.
// No STUN server (the tests run offline); only the tracker given.
import WebTorrent from 'webtorrent'

const [mode, announce, arg, dir] = process.argv.slice(2)
const client = new WebTorrent({
  dht: false,
  lsd: false,
  utPex: false,
  natUpnp: false,
  natPmp: false,
  tracker: { rtcConfig: { iceServers: [] } }
})
client.on('error', (e) => { console.error('client error:', e.message); process.exit(2) })
const opts = { announce: [announce], path: dir }
const say = (o) => console.log(JSON.stringify(o))

if (mode === 'seed') {
  client.seed(arg, opts, (t) => {
    t.on('warning', (e) => console.error('warning:', e.message))
    say({ magnet: t.magnetURI, infoHash: t.infoHash })
  })
  process.stdin.resume()
  process.stdin.on('end', () => client.destroy(() => process.exit(0)))
} else if (mode === 'get') {
  const t = client.add(arg, opts)
  t.on('warning', (e) => console.error('warning:', e.message))
  t.on('wire', (w) => console.error('wire with', w.remoteAddress || 'a WebRTC peer'))
  t.on('done', () => {
    say({ name: t.files[0].name, length: t.length, peers: t.numPeers })
    client.destroy(() => process.exit(0))
  })
} else {
  console.error('usage: peer.mjs seed ANNOUNCE FILE | get ANNOUNCE MAGNET DIR')
  process.exit(64)
}
