#!/usr/bin/env node
// s3front: a reverse proxy in front of s3rver that verifies every request's
// AWS Signature Version 4 with AWS's own signer (@smithy/signature-v4).
//
// s3rver itself does not check V4 signatures, so without this front a client
// that signs wrongly would pass every test. For each request the front parses
// the Authorization header, rebuilds the request with exactly the headers the
// client says it signed, signs it again with the secret it knows for that
// access key at the request's x-amz-date, and compares the signatures. A
// mismatch gets 403 SignatureDoesNotMatch (InvalidAccessKeyId for an unknown
// key) with an S3 XML error body; a good request is forwarded, bodies
// streamed both ways. A signed payload hash (x-amz-content-sha256 other than
// UNSIGNED-PAYLOAD) is checked against the body; only complete bodies that
// match are sent on.
//
// Test hooks: GET /__front/stats (requests per method, refusals),
// POST /__front/reset (zero them).
//
// Usage: node s3front.js --listen 127.0.0.1:PORT --upstream 127.0.0.1:PORT
//                        --key ACCESS:SECRET [--key ...]
'use strict';

const http = require('http');
const crypto = require('crypto');
const { SignatureV4 } = require('@smithy/signature-v4');
const { Sha256 } = require('@aws-crypto/sha256-js');

const MAX_SKEW_MS = 15 * 60 * 1000;
const MAX_BODY = 512 * 1024 * 1024;

function parseArgs(argv) {
  const opts = { keys: new Map() };
  for (let i = 2; i < argv.length; i++) {
    const a = argv[i];
    const v = argv[i + 1];
    if (a === '--listen') opts.listen = v;
    else if (a === '--upstream') opts.upstream = v;
    else if (a === '--key') {
      const c = v ? v.indexOf(':') : -1;
      if (c <= 0) throw new Error(`--key wants ACCESS:SECRET, got '${v}'`);
      opts.keys.set(v.slice(0, c), v.slice(c + 1));
    } else throw new Error(`unknown argument '${a}'`);
    i++;
  }
  if (!opts.listen || !opts.upstream || opts.keys.size === 0)
    throw new Error('usage: s3front.js --listen HOST:PORT --upstream HOST:PORT --key ACCESS:SECRET');
  return opts;
}

function hostPort(s) {
  const c = s.lastIndexOf(':');
  return { host: s.slice(0, c), port: Number(s.slice(c + 1)) };
}

function xmlEscape(s) {
  return String(s).replace(/[<>&'"]/g, (c) => ({ '<': '&lt;', '>': '&gt;', '&': '&amp;', "'": '&apos;', '"': '&quot;' })[c]);
}

class Refusal extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

function sendError(res, status, code, message, resource) {
  const body =
    '<?xml version="1.0" encoding="UTF-8"?>\n' +
    `<Error><Code>${xmlEscape(code)}</Code><Message>${xmlEscape(message)}</Message>` +
    `<Resource>${xmlEscape(resource)}</Resource><RequestId>s3front</RequestId></Error>`;
  res.writeHead(status, {
    'content-type': 'application/xml',
    'content-length': Buffer.byteLength(body),
  });
  res.end(body);
}

// AWS UriEncode: everything but A-Z a-z 0-9 - _ . ~ as %XX upper-case hex.
function awsEncode(s, keepSlash) {
  let out = '';
  for (const b of Buffer.from(s, 'utf8')) {
    const c = String.fromCharCode(b);
    if (/[A-Za-z0-9\-_.~]/.test(c) || (keepSlash && c === '/')) out += c;
    else out += '%' + b.toString(16).toUpperCase().padStart(2, '0');
  }
  return out;
}

function decode(s, what) {
  try {
    return decodeURIComponent(s);
  } catch (e) {
    throw new Refusal(400, 'InvalidURI', `malformed percent-encoding in the ${what}`);
  }
}

// "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request,
//  SignedHeaders=host;x-amz-date, Signature=abc..."
function parseAuthorization(h) {
  const m = /^AWS4-HMAC-SHA256\s+(.*)$/s.exec(h);
  if (!m) throw new Refusal(400, 'InvalidArgument', 'unsupported authorization type (want AWS4-HMAC-SHA256)');
  const parts = {};
  for (const kv of m[1].split(',')) {
    const eq = kv.indexOf('=');
    if (eq < 0) continue;
    parts[kv.slice(0, eq).trim()] = kv.slice(eq + 1).trim();
  }
  if (!parts.Credential || !parts.SignedHeaders || !parts.Signature)
    throw new Refusal(400, 'AuthorizationHeaderMalformed', 'authorization header lacks Credential, SignedHeaders or Signature');
  const scope = parts.Credential.split('/');
  if (scope.length !== 5 || scope[4] !== 'aws4_request')
    throw new Refusal(400, 'AuthorizationHeaderMalformed', `malformed credential scope '${parts.Credential}'`);
  const [accessKey, date, region, service] = scope;
  if (service !== 's3')
    throw new Refusal(400, 'AuthorizationHeaderMalformed', `credential scope names service '${service}', not s3`);
  const signed = parts.SignedHeaders.split(';');
  if (!signed.includes('host'))
    throw new Refusal(400, 'AuthorizationHeaderMalformed', 'the host header must be signed');
  return { accessKey, date, region, signed, signature: parts.Signature.toLowerCase() };
}

function parseAmzDate(s) {
  const m = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(s || '');
  if (!m) throw new Refusal(400, 'AccessDenied', `missing or malformed x-amz-date '${s || ''}'`);
  return new Date(Date.UTC(+m[1], +m[2] - 1, +m[3], +m[4], +m[5], +m[6]));
}

// The query as the signer wants it: decoded names to decoded values (arrays
// for repeats), "?uploads" giving uploads="".
function parseQuery(raw) {
  const q = {};
  if (!raw) return q;
  for (const pair of raw.split('&')) {
    if (pair === '') continue;
    const eq = pair.indexOf('=');
    const k = decode(eq < 0 ? pair : pair.slice(0, eq), 'query');
    const v = eq < 0 ? '' : decode(pair.slice(eq + 1), 'query');
    if (k in q) q[k] = [].concat(q[k], v);
    else q[k] = v;
  }
  return q;
}

// Checks the signature of req; returns the payload hash the client declared.
async function verify(req, keys) {
  const url = req.url;
  const qpos = url.indexOf('?');
  const rawPath = qpos < 0 ? url : url.slice(0, qpos);
  const rawQuery = qpos < 0 ? '' : url.slice(qpos + 1);
  const query = parseQuery(rawQuery);

  if ('X-Amz-Signature' in query || 'Signature' in query)
    throw new Refusal(403, 'AccessDenied', 'presigned requests are refused by the test front');
  const auth = req.headers.authorization;
  if (!auth) throw new Refusal(403, 'AccessDenied', 'anonymous requests are refused by the test front');
  const a = parseAuthorization(auth);
  const secret = keys.get(a.accessKey);
  if (secret === undefined)
    throw new Refusal(403, 'InvalidAccessKeyId', 'The AWS Access Key Id you provided does not exist in our records.');

  const amzDate = req.headers['x-amz-date'];
  const when = parseAmzDate(amzDate);
  if (amzDate.slice(0, 8) !== a.date)
    throw new Refusal(403, 'SignatureDoesNotMatch', `credential date ${a.date} is not the x-amz-date day ${amzDate}`);
  if (Math.abs(Date.now() - when.getTime()) > MAX_SKEW_MS)
    throw new Refusal(403, 'RequestTimeTooSkewed', 'The difference between the request time and the current time is too large.');

  const payloadHash = req.headers['x-amz-content-sha256'];
  if (!payloadHash) throw new Refusal(400, 'InvalidRequest', 'missing x-amz-content-sha256');
  if (payloadHash.startsWith('STREAMING-'))
    throw new Refusal(501, 'NotImplemented', 'aws-chunked streaming payloads are not supported by the test front');
  if (payloadHash !== 'UNSIGNED-PAYLOAD' && !/^[0-9a-f]{64}$/.test(payloadHash))
    throw new Refusal(400, 'InvalidArgument', 'x-amz-content-sha256 is neither a hex SHA-256 nor UNSIGNED-PAYLOAD');

  // Exactly the signed headers, nothing else. A signed header that is not
  // there cannot match.
  const headers = {};
  for (const name of a.signed) {
    const v = req.headers[name];
    if (v === undefined)
      throw new Refusal(403, 'SignatureDoesNotMatch', `signed header '${name}' is not in the request`);
    headers[name] = Array.isArray(v) ? v.join(',') : String(v);
  }
  // S3's canonical URI: the decoded path, encoded once by the AWS rules.
  const canonicalPath = awsEncode(decode(rawPath, 'path'), true);

  const signer = new SignatureV4({
    credentials: { accessKeyId: a.accessKey, secretAccessKey: secret },
    region: a.region,
    service: 's3',
    sha256: Sha256,
    uriEscapePath: false,
    applyChecksum: false,
  });
  const signed = await signer.sign(
    {
      method: req.method,
      protocol: 'http:',
      hostname: String(req.headers.host || ''),
      path: canonicalPath,
      query,
      headers,
    },
    {
      signingDate: when,
      signingRegion: a.region,
      signingService: 's3',
      signableHeaders: new Set(a.signed),
    },
  );
  const m = /Signature=([0-9a-f]{64})/.exec(signed.headers.authorization || '');
  const want = Buffer.from(m ? m[1] : '', 'utf8');
  const got = Buffer.from(a.signature, 'utf8');
  if (want.length !== got.length || !crypto.timingSafeEqual(want, got))
    throw new Refusal(403, 'SignatureDoesNotMatch',
      'The request signature we calculated does not match the signature you provided. Check your key and signing method.');
  // The re-signed list must be the client's list: a header the signer
  // would drop (e.g. "date", which it regenerates) fails here, not silently.
  const sh = /SignedHeaders=([^,]+)/.exec(signed.headers.authorization);
  if (!sh || sh[1] !== [...a.signed].sort().join(';'))
    throw new Refusal(403, 'SignatureDoesNotMatch', `signed headers '${a.signed.join(';')}' cannot be verified`);
  return payloadHash;
}

function main() {
  let opts;
  try {
    opts = parseArgs(process.argv);
  } catch (e) {
    process.stderr.write(`s3front: ${e.message}\n`);
    process.exit(2);
  }
  const listen = hostPort(opts.listen);
  const upstream = hostPort(opts.upstream);
  const stats = { requests: {}, refused: 0, forwarded: 0, upstream_errors: 0 };
  const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });

  const server = http.createServer(async (req, res) => {
    if (req.url === '/__front/stats' && req.method === 'GET') {
      const body = JSON.stringify(stats);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(body);
      return;
    }
    if (req.url === '/__front/reset' && req.method === 'POST') {
      stats.requests = {};
      stats.refused = 0;
      stats.forwarded = 0;
      stats.upstream_errors = 0;
      res.writeHead(204);
      res.end();
      return;
    }
    stats.requests[req.method] = (stats.requests[req.method] || 0) + 1;

    // Hold the body until the signature is checked (the signer is async).
    req.pause();
    let payloadHash;
    try {
      payloadHash = await verify(req, opts.keys);
    } catch (e) {
      stats.refused++;
      if (!(e instanceof Refusal)) {
        process.stderr.write(`s3front: internal error: ${e.stack}\n`);
        e = new Refusal(500, 'InternalError', String(e.message));
      }
      sendError(res, e.status, e.code, e.message, req.url);
      req.resume(); // drain, so the connection can be reused or closed cleanly
      return;
    }

    // The body is collected whole, and the request is made upstream only
    // when it is complete (and, if the client signed its hash, when the hash
    // matches): s3rver stores a truncated object when a request is cut off,
    // which real S3 never does, so nothing incomplete may reach it. Bodies
    // are at most one part or one single PUT in the tests; MAX_BODY bounds
    // the memory.
    const hash = payloadHash === 'UNSIGNED-PAYLOAD' ? null : crypto.createHash('sha256');
    const chunks = [];
    let size = 0;
    let tooBig = false;
    req.on('data', (chunk) => {
      size += chunk.length;
      if (size > MAX_BODY) {
        tooBig = true;
        chunks.length = 0;
        return;
      }
      if (hash) hash.update(chunk);
      chunks.push(chunk);
    });
    req.on('end', () => {
      if (tooBig) {
        stats.refused++;
        sendError(res, 400, 'EntityTooLarge', `the test front takes bodies up to ${MAX_BODY} bytes`, req.url);
        return;
      }
      if (hash && hash.digest('hex') !== payloadHash) {
        stats.refused++;
        sendError(res, 400, 'XAmzContentSHA256Mismatch',
          'The provided x-amz-content-sha256 header does not match what was computed.', req.url);
        return;
      }
      forward(req, res, Buffer.concat(chunks, size));
    });
    req.resume();
  });

  // Sends a verified request to s3rver and streams the answer back.
  function forward(req, res, body) {
    const headers = { ...req.headers };
    delete headers.authorization; // s3rver takes anonymous requests
    delete headers['transfer-encoding'];
    headers['content-length'] = String(body.length);
    const up = http.request({
      host: upstream.host,
      port: upstream.port,
      method: req.method,
      path: req.url,
      headers,
      agent,
    });
    up.on('response', (ur) => {
      stats.forwarded++;
      res.writeHead(ur.statusCode, ur.headers);
      ur.pipe(res);
      // The store died mid-body: cut the client's connection, so it sees a
      // short body rather than a complete-looking one.
      ur.on('aborted', () => res.destroy());
      ur.on('error', () => res.destroy());
    });
    up.on('error', (err) => {
      stats.upstream_errors++;
      if (res.headersSent) {
        res.destroy();
        return;
      }
      sendError(res, 503, 'ServiceUnavailable', `upstream: ${err.code || err.message}`, req.url);
    });
    res.on('close', () => {
      if (!res.writableFinished) up.destroy();
    });
    up.end(body);
  }
  server.keepAliveTimeout = 30000;
  server.on('clientError', (err, sock) => sock.destroy());
  server.listen(listen.port, listen.host, () => {
    const addr = server.address();
    process.stdout.write(`s3front ready on ${addr.address}:${addr.port} upstream ${opts.upstream}\n`);
  });
  const stop = () => server.close(() => process.exit(0));
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main();
