'use strict';
// Shared setup of the end-to-end suite: the official client pointed at the server under test, raw
// HTTP requests for what the client cannot show, and the schema check of every response.
//
// The suite is run by e2e_test.go, which builds and starts `edgeplane serve` and sets:
//   EDGEPLANE_E2E_BASE_URL        the server's base URL
//   EDGEPLANE_E2E_TOKEN           an admin API key of account "default"
//   EDGEPLANE_E2E_PAGING_TOKEN    an admin API key of an otherwise empty account (paging test)
//   EDGEPLANE_E2E_FIXTURES        a JSON file with PEM and SSH key material made for the run
//   EDGEPLANE_E2E_SPEC            the published schema (default testdata/spec/ngrok-openapi.yaml of the repository)
//   EDGEPLANE_E2E_COVERAGE        a directory for the list of operations whose responses conformed

const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');
const { after, afterEach } = require('node:test');
const { Ngrok } = require('@ngrok/ngrok-api');
const { SpecValidator } = require('./schema');

function env(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run this suite with "go test ./e2e" (see the Compatibility section of docs/api.md)`);
  return v;
}

const BASE_URL = env('EDGEPLANE_E2E_BASE_URL').replace(/\/+$/, '');
const TOKEN = env('EDGEPLANE_E2E_TOKEN');
const basePath = new URL(BASE_URL).pathname.replace(/\/+$/, '');

const spec = new SpecValidator();

// The client's own HTTP stack: wretch with node-fetch, both resolved from the client's package
// so that they are the very modules it uses.
const clientDir = path.dirname(require.resolve('@ngrok/ngrok-api/package.json'));
const wretch = require(require.resolve('wretch', { paths: [clientDir] }));
const nodeFetch = require(require.resolve('node-fetch', { paths: [clientDir] }));

// Every response, of the client and of raw requests, passes through check(); problems are
// collected and fail the test that caused them (afterEach below).
const problems = [];
// checked counts the responses validated and collects the operations ("GET /ip_policies/{}")
// whose success responses conformed; with EDGEPLANE_E2E_COVERAGE set, they are written there
// when the process exits, and e2e_test.go requires every operation edgeplane serves among them.
const checked = { count: 0, operations: new Set() };
if (process.env.EDGEPLANE_E2E_COVERAGE) {
  process.on('exit', () => {
    fs.writeFileSync(path.join(process.env.EDGEPLANE_E2E_COVERAGE, `${process.pid}.json`), JSON.stringify([...checked.operations]));
  });
}
// requests logs every request of this process (method, url, status), for tests that assert what
// the client sent.
const requests = [];

function check(method, url, status, text) {
  const u = new URL(url);
  let p = u.pathname;
  if (!p.startsWith(basePath)) {
    problems.push(`${method} ${url}: not under the base URL ${BASE_URL}`);
    return;
  }
  p = p.slice(basePath.length) || '/';
  const r = spec.check(method, p, status, text);
  checked.count++;
  if (r.operation && r.problems.length === 0) checked.operations.add(r.operation);
  problems.push(...r.problems);
}

// validatingFetch is node-fetch plus the check. The body is read once and handed back in a new
// Response, because node-fetch v2's clone() stalls on large bodies unless both copies are read.
async function validatingFetch(url, opts = {}) {
  const res = await nodeFetch(url, opts);
  const text = await res.text();
  const method = (opts.method || 'GET').toUpperCase();
  requests.push({ method, url: String(url), status: res.status });
  check(method, res.url || url, res.status, text);
  return new nodeFetch.Response(text, { status: res.status, statusText: res.statusText, headers: res.headers, url: res.url });
}

// The client installed node-fetch as wretch's global fetch when it was loaded; replace it.
wretch().polyfills({ fetch: validatingFetch });

function flushProblems() {
  if (problems.length) {
    const all = problems.splice(0);
    assert.fail(`${all.length} response(s) do not match the published schema:\n` + all.join('\n'));
  }
}
afterEach(flushProblems);
after(flushProblems); // responses of after() hooks

function client(token = TOKEN) {
  return new Ngrok({ apiToken: token, baseUrl: BASE_URL });
}

// raw sends a request the way curl would, through the same schema check, and returns the status,
// headers, the body text and the parsed body (null when empty).
async function raw(method, pathAndQuery, body, { token = TOKEN, headers = {} } = {}) {
  const h = { Authorization: 'Bearer ' + token, 'Ngrok-Version': '2', ...headers };
  let data;
  if (body !== undefined) {
    h['Content-Type'] = 'application/json';
    data = typeof body === 'string' ? body : JSON.stringify(body);
  }
  const url = pathAndQuery.startsWith('http') ? pathAndQuery : BASE_URL + pathAndQuery;
  const res = await validatingFetch(url, { method, headers: h, body: data });
  const text = await res.text();
  return { status: res.status, headers: res.headers, text, json: text ? JSON.parse(text) : null };
}

let fixturesCache;
function fixtures() {
  if (!fixturesCache) fixturesCache = JSON.parse(fs.readFileSync(env('EDGEPLANE_E2E_FIXTURES'), 'utf8'));
  return fixturesCache;
}

// unique returns a short random token for names that must not collide across test files, which
// node runs in parallel processes against the same server.
function unique() {
  return crypto.randomBytes(5).toString('hex');
}

function freshDomain(label = 'e2e') {
  return `${label}-${unique()}.example.com`;
}

// clientDeleteBug asserts the client's delete() bug (see docs/api.md): the server answers 204 with
// an empty body, as the schema says, and the client rejects because it parses that empty body as
// JSON, then fails to parse the resulting message as an API error. The object is deleted anyway,
// which callers assert with a raw request.
async function clientDeleteBug(promise) {
  await assert.rejects(promise, err => {
    assert.ok(err instanceof SyntaxError, `expected the client's SyntaxError, got ${err && err.constructor && err.constructor.name}: ${err && err.message}`);
    return true;
  });
}

// deleteAndConfirm deletes through the client, expects its bug, and proves with raw requests that
// the object is gone (GET is 404).
async function deleteAndConfirm(promise, objectPath) {
  await clientDeleteBug(promise);
  const r = await raw('GET', objectPath);
  assert.equal(r.status, 404, `${objectPath} still exists after delete: ${r.text}`);
  assert.equal(r.json.error_code, 'ERR_NGROK_404');
}

// rawDelete deletes with a raw request and asserts the wire: 204 and not one byte of body.
async function rawDelete(objectPath) {
  const r = await raw('DELETE', objectPath);
  assert.equal(r.status, 204, `DELETE ${objectPath}: ${r.status} ${r.text}`);
  assert.equal(r.text, '');
  const g = await raw('GET', objectPath);
  assert.equal(g.status, 404);
}

// idRE is an edgeplane id of the prefix: <prefix>_<27-character KSUID>.
function idRE(prefix) {
  return new RegExp(`^${prefix}_[0-9A-Za-z]{27}$`);
}

// assertObject checks what every object shows: its id, its uri under the base URL and an RFC 3339
// UTC created_at of second precision.
function assertObject(obj, prefix, objectPath) {
  assert.match(obj.id, idRE(prefix));
  assert.equal(obj.uri, BASE_URL + objectPath.replace('{id}', obj.id));
  assert.match(obj.createdAt, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
}

module.exports = {
  BASE_URL, TOKEN, spec, checked, problems, requests, client, raw, fixtures, unique, freshDomain,
  clientDeleteBug, deleteAndConfirm, rawDelete, idRE, assertObject, env,
};
