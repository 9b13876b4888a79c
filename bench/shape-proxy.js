#!/usr/bin/env node
// shape-proxy: an HTTP reverse proxy that makes a loopback S3 server behave
// like cloud object storage, for the benchmarks. Per request it waits a
// first-byte latency before forwarding; response bodies are paced by two
// token buckets, one per client connection and one shared by all of them.
// Requests (signatures included) are forwarded unchanged, Host header too,
// so a SigV4-signed request still verifies upstream. Standard library only.
//
// Usage: node shape-proxy.js --listen 127.0.0.1:PORT --upstream 127.0.0.1:PORT
//          [--latency-ms 20] [--conn-mbps 100] [--total-mbps 1000]
//          [--stall-after BYTES --stall-ms MS]
// (MB/s = 10^6 bytes per second; 0 turns a limit off; a stall pauses every
// response body once, for MS, after its first BYTES or more). Prints
// "shape-proxy ready" when it listens. GET /__shape/stats answers the request
// and byte counts.
'use strict';

const http = require('http');

function parseArgs(argv) {
  const o = { latencyMs: 20, connMBps: 100, totalMBps: 1000, stallAfter: 0, stallMs: 0 };
  for (let i = 2; i < argv.length; i += 2) {
    const [a, v] = [argv[i], argv[i + 1]];
    if (v === undefined) throw new Error(`${a}: missing value`);
    if (a === '--listen') o.listen = v;
    else if (a === '--upstream') o.upstream = v;
    else if (a === '--latency-ms') o.latencyMs = Number(v);
    else if (a === '--conn-mbps') o.connMBps = Number(v);
    else if (a === '--total-mbps') o.totalMBps = Number(v);
    else if (a === '--stall-after') o.stallAfter = Number(v);
    else if (a === '--stall-ms') o.stallMs = Number(v);
    else throw new Error(`unknown flag ${a}`);
  }
  if (!o.listen || !o.upstream) throw new Error('--listen and --upstream are required');
  for (const k of ['latencyMs', 'connMBps', 'totalMBps', 'stallAfter', 'stallMs'])
    if (!Number.isFinite(o[k]) || o[k] < 0) throw new Error(`bad ${k}`);
  return o;
}

function hostPort(s) {
  const i = s.lastIndexOf(':');
  return { host: s.slice(0, i), port: Number(s.slice(i + 1)) };
}

const opts = parseArgs(process.argv);
const up = hostPort(opts.upstream);
const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity });
const CHUNK = 64 * 1024;

// A token bucket as "the time at which the link is free again": sending n
// bytes moves it n / rate into the future; the caller waits until then.
class Pacer {
  constructor(mbps) { this.rate = mbps * 1e6 / 1000; this.free = 0; } // bytes per ms
  reserve(now, n) {
    if (!this.rate) return now;
    this.free = Math.max(now, this.free) + n / this.rate;
    return this.free;
  }
}
const total = new Pacer(opts.totalMBps);
const stats = { requests: 0, bytes: 0, errors: 0 };

function pump(src, dst, conn) {
  // Paced copy: one chunk at a time, each sent when both buckets allow.
  let queue = [], busy = false, ended = false, sent = 0, stalled = false;
  const next = () => {
    while (!busy) {
      if (opts.stallMs > 0 && !stalled && sent > 0 && sent >= opts.stallAfter) {
        stalled = true;
        busy = true;
        setTimeout(() => { busy = false; next(); }, opts.stallMs);
        return;
      }
      const buf = queue.shift();
      if (!buf) {
        if (ended) dst.end();
        else src.resume();
        return;
      }
      sent += buf.length;
      const now = performance.now();
      const at = Math.max(conn.reserve(now, buf.length), total.reserve(now, buf.length));
      const send = () => {
        stats.bytes += buf.length;
        busy = !dst.write(buf);
        if (busy) dst.once('drain', () => { busy = false; next(); });
      };
      // Timers are coarse (about 1 ms): a chunk due within a millisecond
      // goes now, and the buckets carry the debt to the next one.
      if (at - now <= 1) {
        send();
        continue;
      }
      busy = true;
      setTimeout(() => { busy = false; send(); next(); }, at - now);
      return;
    }
  };
  src.on('data', (d) => {
    src.pause();
    for (let o = 0; o < d.length; o += CHUNK) queue.push(d.subarray(o, o + CHUNK));
    next();
  });
  src.on('end', () => { ended = true; next(); });
  src.on('error', () => dst.destroy());
}

const server = http.createServer((req, res) => {
  if (req.url === '/__shape/stats') {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ ...stats, ...opts }));
    return;
  }
  stats.requests++;
  const sock = req.socket;
  if (!sock.pacer) sock.pacer = new Pacer(opts.connMBps);
  // The first-byte latency: the request goes upstream that much later, so
  // the store's own time comes on top of it, as it would on a real network.
  const forward = () => {
    const preq = http.request({
      host: up.host, port: up.port, method: req.method, path: req.url,
      headers: req.headers, agent,
    }, (pres) => {
      res.writeHead(pres.statusCode, pres.statusMessage, pres.rawHeaders);
      pump(pres, res, sock.pacer);
    });
    preq.on('error', (e) => {
      stats.errors++;
      if (!res.headersSent) {
        res.writeHead(502, { 'content-type': 'text/plain' });
        res.end(`shape-proxy: upstream ${opts.upstream}: ${e.message}\n`);
      } else {
        res.destroy();
      }
    });
    req.pipe(preq);
  };
  if (opts.latencyMs > 0) setTimeout(forward, opts.latencyMs);
  else forward();
});
server.keepAliveTimeout = 60000;
const l = hostPort(opts.listen);
server.listen(l.port, l.host, () => console.log(`shape-proxy ready on ${opts.listen}`));
