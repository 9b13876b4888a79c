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
// Test hooks: GET /__front/stats (requests per method, refusals, client
// connections accepted),
// POST /__front/reset (zero them),
// POST /__front/pace?bps=N (send the body of every ranged GET from then on
// at N bytes/s at most, each response on its own; 0: as fast as it comes).
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

// "/bucket/key..." (path style) names an object; "/bucket" or "/" does not.
// Sub-resource queries (?uploadId=, ?partNumber=, ?acl) are left to s3rver.
function isObjectPath(url) {
  const q = url.indexOf('?');
  const path = q < 0 ? url : url.slice(0, q);
  return q < 0 && /^\/[^/]+\/.+/.test(path);
}

function xmlUnescape(s) {
  return s.replace(/&(lt|gt|amp|quot|apos|#x[0-9a-fA-F]+|#\d+);/g, (all, e) => {
    switch (e) {
    case 'lt': return '<';
    case 'gt': return '>';
    case 'amp': return '&';
    case 'quot': return '"';
    case 'apos': return "'";
    default:
      return String.fromCodePoint(e[1] === 'x' ? parseInt(e.slice(2), 16) : Number(e.slice(1)));
    }
  });
}

// The decoded query of "GET /bucket?list-type=2...", else null.
function listV2Request(url) {
  const q = url.indexOf('?');
  if (q < 0 || !/^\/[^/?]+\/?$/.test(url.slice(0, q))) return null;
  let query;
  try {
    query = parseQuery(url.slice(q + 1));
  } catch (e) {
    return null;
  }
  return query['list-type'] === '2' ? query : null;
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
  const stats = { requests: {}, refused: 0, forwarded: 0, upstream_errors: 0, connections: 0 };
  const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
  let paceBps = 0;

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
      stats.connections = 0;
      res.writeHead(204);
      res.end();
      return;
    }
    if (req.url.startsWith('/__front/pace?') && req.method === 'POST') {
      let bps = NaN;
      try {
        bps = Number(parseQuery(req.url.slice(req.url.indexOf('?') + 1)).bps);
      } catch (e) { /* a bad escape: refused below */ }
      if (!Number.isInteger(bps) || bps < 0) {
        res.writeHead(400);
        res.end('bps: want a whole number of bytes per second\n');
        return;
      }
      paceBps = bps;
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
      const body = Buffer.concat(chunks, size);
      const list = req.method === 'GET' ? listV2Request(req.url) : null;
      if (list) {
        listObjectsV2(req, res, list).catch((e) => {
          stats.upstream_errors++;
          if (res.headersSent) res.destroy();
          else sendError(res, 503, 'ServiceUnavailable', `upstream: ${e.code || e.message}`, req.url);
        });
      } else if ((req.method === 'GET' || req.method === 'HEAD') && isObjectPath(req.url) &&
          (req.headers.range || req.headers['if-match'])) {
        conditionalGet(req, res).catch((e) => {
          stats.upstream_errors++;
          if (res.headersSent) res.destroy();
          else sendError(res, 503, 'ServiceUnavailable', `upstream: ${e.code || e.message}`, req.url);
        });
      } else {
        forward(req, res, body);
      }
    });
    req.resume();
  });

  // s3rver 3.7.1 gets ranges wrong ("bytes=0-0" returns the whole object,
  // any range of an empty object a broken 206, "bytes=-N" the first N+1
  // bytes) and ignores If-Match. Real S3 does neither, so the front answers
  // these itself: a HEAD for the size and ETag, then If-Match (412
  // PreconditionFailed), an unsatisfiable range (416 InvalidRange), or a
  // GET of the range, cut to exactly the bytes asked for.
  // A kept-alive upstream socket that s3rver closed as we reused it fails
  // with ECONNRESET before any response: the request never reached it, so
  // it is sent again (what Node's documentation advises, req.reusedSocket).
  function staleSocket(r, err) {
    return r.reusedSocket && err.code === 'ECONNRESET';
  }

  function upstreamRequest(method, path, headers, retried) {
    return new Promise((resolve, reject) => {
      const r = http.request({ host: upstream.host, port: upstream.port, method, path, headers, agent });
      r.on('response', resolve);
      r.on('error', (err) => {
        if (!retried && staleSocket(r, err)) {
          upstreamRequest(method, path, headers, true).then(resolve, reject);
          return;
        }
        reject(err);
      });
      r.end();
    });
  }

  function etagMatches(cond, etag) {
    const norm = (t) => t.trim().replace(/^W\//, '');
    return cond.split(',').some((c) => norm(c) === '*' || norm(c) === norm(etag));
  }

  // [start, end] of a single "bytes=" range over size bytes, null when it
  // cannot be satisfied, undefined when there is no usable range (S3 then
  // sends the whole object).
  function parseRange(h, size) {
    const m = /^bytes=(\d*)-(\d*)$/.exec((h || '').trim());
    if (!m || (m[1] === '' && m[2] === '')) return undefined;
    if (m[1] === '') {
      const n = Number(m[2]);
      if (n === 0 || size === 0) return null;
      return [Math.max(0, size - n), size - 1];
    }
    const start = Number(m[1]);
    const end = m[2] === '' ? size - 1 : Math.min(Number(m[2]), size - 1);
    if (m[2] !== '' && Number(m[2]) < start) return undefined; // invalid: ignored, as S3 does
    if (start >= size) return null;
    return [start, end];
  }

  async function conditionalGet(req, res) {
    const base = { ...req.headers };
    for (const h of ['authorization', 'range', 'if-match', 'if-none-match', 'if-modified-since',
                     'if-unmodified-since', 'content-length', 'transfer-encoding'])
      delete base[h];
    for (let attempt = 0; ; attempt++) {
      const head = await upstreamRequest('HEAD', req.url, base);
      head.resume();
      if (head.statusCode !== 200) {
        // Missing key and the like: let s3rver answer the plain request.
        forward(req, res, Buffer.alloc(0), true);
        return;
      }
      const size = Number(head.headers['content-length']);
      const etag = head.headers.etag || '';
      const cond = req.headers['if-match'];
      if (cond && !etagMatches(cond, etag)) {
        sendError(res, 412, 'PreconditionFailed', 'At least one of the pre-conditions you specified did not hold', req.url);
        return;
      }
      const range = req.method === 'GET' ? parseRange(req.headers.range, size) : undefined;
      if (range === null) {
        const body = '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InvalidRange</Code>' +
          '<Message>The requested range is not satisfiable</Message>' +
          `<RangeRequested>${xmlEscape(req.headers.range)}</RangeRequested>` +
          `<ActualObjectSize>${size}</ActualObjectSize></Error>`;
        res.writeHead(416, { 'content-type': 'application/xml', 'content-range': `bytes */${size}`,
                             'content-length': Buffer.byteLength(body) });
        res.end(body);
        return;
      }
      if (req.method === 'HEAD' || range === undefined) {
        forward(req, res, Buffer.alloc(0), true);
        return;
      }
      const [start, end] = range;
      const want = end - start + 1;
      // end 0 is what s3rver misreads; ask it for an open range instead.
      const upRange = end === 0 ? `bytes=${start}-` : `bytes=${start}-${end}`;
      const ur = await upstreamRequest('GET', req.url, { ...base, range: upRange });
      if ((ur.statusCode !== 206 && ur.statusCode !== 200) || (ur.headers.etag || '') !== etag) {
        ur.destroy();
        // Replaced between the HEAD and the GET: start again.
        if (attempt < 3) continue;
        sendError(res, 503, 'SlowDown', 'object kept changing', req.url);
        return;
      }
      stats.forwarded++;
      const headers = { ...ur.headers };
      headers['content-length'] = String(want);
      headers['content-range'] = `bytes ${start}-${end}/${size}`;
      res.writeHead(206, headers);
      let sent = 0;
      let holds = 0; // reasons to wait (a full socket, the pace) before more
      const hold = () => { if (holds++ === 0) ur.pause(); };
      const release = () => { if (--holds === 0) ur.resume(); };
      const bps = paceBps;
      ur.on('data', (chunk) => {
        if (sent >= want) return;
        const part = chunk.length > want - sent ? chunk.subarray(0, want - sent) : chunk;
        sent += part.length;
        if (!res.write(part)) {
          hold();
          res.once('drain', release);
        }
        if (bps > 0 && sent < want) {
          hold();
          setTimeout(release, (part.length * 1000) / bps);
        }
        if (sent === want) {
          res.end();
          ur.destroy();
        }
      });
      ur.on('end', () => {
        if (sent < want) res.destroy(); // short: never look complete
      });
      ur.on('aborted', () => { if (sent < want) res.destroy(); });
      ur.on('error', () => { if (sent < want) res.destroy(); });
      res.on('close', () => ur.destroy());
      return;
    }
  }

  // ListObjectsV2 as S3 does it. s3rver 3.7.1 does not count common
  // prefixes against max-keys and repeats them across pages, so the front
  // lists every key under the prefix from s3rver (no delimiter, which it
  // gets right) and groups, orders, pages and tokens them itself. The
  // continuation token is the last element returned, base64-encoded.
  async function listObjectsV2(req, res, q) {
    const prefix = q.prefix || '';
    const delimiter = q.delimiter || '';
    let max = q['max-keys'] === undefined ? 1000 : Number(q['max-keys']);
    if (!Number.isInteger(max) || max < 0) {
      sendError(res, 400, 'InvalidArgument', 'Provided max-keys not an integer or within integer range', req.url);
      return;
    }
    max = Math.min(max, 1000);
    let after = q['start-after'] || '';
    if (q['continuation-token'] !== undefined) {
      after = Buffer.from(q['continuation-token'], 'base64').toString('utf8');
      if (!after) {
        sendError(res, 400, 'InvalidArgument', 'The continuation token provided is incorrect', req.url);
        return;
      }
    }
    const bucket = req.url.slice(1, req.url.indexOf('?'));
    const elems = new Map(); // name -> null (a common prefix) or its <Contents> XML
    let token = null;
    do {
      // s3rver returns at most 1000 keys a page; follow its own tokens.
      const upPath = `/${bucket}?list-type=2&prefix=${awsEncode(prefix, false)}` +
        (token ? `&continuation-token=${awsEncode(token, false)}` : '');
      const ur = await upstreamRequest('GET', upPath, { host: req.headers.host });
      const chunks = [];
      for await (const c of ur) chunks.push(c);
      const xml = Buffer.concat(chunks).toString('utf8');
      if (ur.statusCode !== 200) {
        res.writeHead(ur.statusCode, { 'content-type': 'application/xml', 'content-length': Buffer.byteLength(xml) });
        res.end(xml);
        return;
      }
      for (const m of xml.matchAll(/<Contents>([\s\S]*?)<\/Contents>/g)) {
        const km = /<Key>([\s\S]*?)<\/Key>/.exec(m[1]);
        if (!km) continue;
        const key = xmlUnescape(km[1]);
        if (!key.startsWith(prefix)) continue;
        const cut = delimiter ? key.indexOf(delimiter, prefix.length) : -1;
        if (cut >= 0) elems.set(key.slice(0, cut + delimiter.length), null);
        else elems.set(key, m[1]);
      }
      const t = /<IsTruncated>true<\/IsTruncated>/.test(xml) && /<NextContinuationToken>([^<]+)<\/NextContinuationToken>/.exec(xml);
      token = t ? xmlUnescape(t[1]) : null;
    } while (token);
    stats.forwarded++;
    const names = [...elems.keys()]
      .filter((n) => Buffer.compare(Buffer.from(n), Buffer.from(after)) > 0)
      .sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
    const page = names.slice(0, max);
    const truncated = names.length > page.length;
    const enc = q['encoding-type'] === 'url' ? (v) => awsEncode(v, true) : (v) => v;
    let out = '<?xml version="1.0" encoding="UTF-8"?>\n' +
      '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">' +
      `<Name>${xmlEscape(bucket)}</Name><Prefix>${xmlEscape(enc(prefix))}</Prefix>` +
      (delimiter ? `<Delimiter>${xmlEscape(enc(delimiter))}</Delimiter>` : '') +
      `<MaxKeys>${max}</MaxKeys><KeyCount>${page.length}</KeyCount>` +
      `<IsTruncated>${truncated}</IsTruncated>` +
      (q['continuation-token'] !== undefined ? `<ContinuationToken>${xmlEscape(q['continuation-token'])}</ContinuationToken>` : '') +
      (truncated ? `<NextContinuationToken>${Buffer.from(page[page.length - 1]).toString('base64')}</NextContinuationToken>` : '') +
      (q['start-after'] ? `<StartAfter>${xmlEscape(enc(q['start-after']))}</StartAfter>` : '') +
      (q['encoding-type'] ? `<EncodingType>${xmlEscape(q['encoding-type'])}</EncodingType>` : '');
    for (const n of page) {
      const c = elems.get(n);
      if (c !== null)
        out += '<Contents>' + c.replace(/<Key>[\s\S]*?<\/Key>/, `<Key>${xmlEscape(enc(n))}</Key>`) + '</Contents>';
    }
    for (const n of page)
      if (elems.get(n) === null) out += `<CommonPrefixes><Prefix>${xmlEscape(enc(n))}</Prefix></CommonPrefixes>`;
    out += '</ListBucketResult>';
    res.writeHead(200, { 'content-type': 'application/xml', 'content-length': Buffer.byteLength(out) });
    res.end(out);
  }

  // Sends a verified request to s3rver and streams the answer back.
  function forward(req, res, body, plain, retried) {
    const headers = { ...req.headers };
    delete headers.authorization; // s3rver takes anonymous requests
    if (plain) {
      delete headers.range;
      delete headers['if-match'];
    }
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
      if (!retried && !res.headersSent && staleSocket(up, err)) {
        forward(req, res, body, plain, true);
        return;
      }
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
  server.on('connection', () => stats.connections++);
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
