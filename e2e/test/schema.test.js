'use strict';
// The validator itself: it must reject what the strict profile forbids (so that the suite's
// passing means something) and allow exactly the documented deviations. No server needed.

const { describe, it } = require('node:test');
const assert = require('node:assert/strict');
const { SpecValidator } = require('../lib/schema');
const deviations = require('../lib/deviations');

const v = new SpecValidator();
const ID = '3MPxSmYayyYstln19fHeyGBFPUK';
const policy = () => ({ id: 'ipp_' + ID, uri: 'http://h/ip_policies/ipp_' + ID, created_at: '2026-01-01T00:00:00Z', description: '', metadata: '' });
const ok = (method, path, status, body) => {
  const r = v.check(method, path, status, body === undefined ? '' : JSON.stringify(body));
  assert.deepEqual(r.problems, []);
};
const bad = (method, path, status, body, re) => {
  const r = v.check(method, path, status, typeof body === 'string' ? body : JSON.stringify(body));
  assert.equal(r.problems.length, 1, `expected a problem for ${JSON.stringify(body)}`);
  if (re) assert.match(r.problems[0], re);
};

describe('the schema validator', () => {
  it('accepts a conforming object and list', () => {
    ok('GET', '/ip_policies/ipp_' + ID, 200, policy());
    ok('GET', '/ip_policies', 200, { ip_policies: [policy()], uri: 'http://h/ip_policies', next_page_uri: 'http://h/ip_policies?before_id=x' });
  });

  it('requires every property of the schema', () => {
    const p = policy();
    delete p.metadata;
    bad('GET', '/ip_policies/ipp_' + ID, 200, p, /must have required property 'metadata'/);
  });

  it('refuses properties the schema does not have', () => {
    bad('GET', '/ip_policies/ipp_' + ID, 200, { ...policy(), colour: 'blue' }, /additional properties \(colour\)/);
  });

  it('checks types, integers included', () => {
    bad('GET', '/ip_policies/ipp_' + ID, 200, { ...policy(), description: 5 }, /must be string/);
    const hr = { id: 'bkdhr_' + ID, uri: 'u', created_at: 'c', description: '', metadata: '', body: '', headers: {}, status_code: 200.5 };
    bad('GET', '/backends/http_response/bkdhr_' + ID, 200, hr, /must be integer/);
    ok('GET', '/backends/http_response/bkdhr_' + ID, 200, { ...hr, status_code: 200 });
  });

  it('refuses null where no deviation allows it, and allows it where one does', () => {
    bad('GET', '/ip_policies/ipp_' + ID, 200, { ...policy(), description: null }, /must be string/);
    ok('GET', '/ip_policies', 200, { ip_policies: [], uri: 'u', next_page_uri: null });
    bad('GET', '/ip_policies', 200, { ip_policies: [], uri: 'u', next_page_uri: 5 });
  });

  it('checks nested objects strictly (a module, a Ref)', () => {
    const edge = {
      id: 'edgtcp_' + ID, uri: 'u', created_at: 'c', description: '', metadata: '', hostports: [],
      backend: null, ip_restriction: null, traffic_policy: null,
    };
    ok('GET', '/edges/tcp/edgtcp_' + ID, 200, edge);
    bad('GET', '/edges/tcp/edgtcp_' + ID, 200, { ...edge, backend: { enabled: true } }, /required property 'backend'/);
    bad('GET', '/edges/tcp/edgtcp_' + ID, 200, { ...edge, backend: { enabled: true, backend: { id: 'x' } } }, /required property 'uri'/);
    ok('GET', '/edges/tcp/edgtcp_' + ID, 200, { ...edge, backend: { enabled: true, backend: { id: 'x', uri: 'y' } } });
  });

  it('requires the documented extra route field jwt_validation', () => {
    const route = {
      edge_id: 'e', id: 'r', created_at: 'c', match_type: 'exact_path', match: '/', uri: 'u', description: '', metadata: '',
      backend: null, ip_restriction: null, circuit_breaker: null, compression: null, request_headers: null, response_headers: null,
      webhook_verification: null, oauth: null, saml: null, oidc: null, websocket_tcp_converter: null, user_agent_filter: null,
      traffic_policy: null,
    };
    bad('GET', '/edges/https/e/routes/r', 200, route, /jwt_validation/);
    ok('GET', '/edges/https/e/routes/r', 200, { ...route, jwt_validation: null });
    ok('GET', '/edges/https/e/routes', 200, { routes: [{ ...route, jwt_validation: null }], uri: 'u', next_page_uri: null });
  });

  it('knows which operations exist and which have bodies', () => {
    bad('GET', '/no_such_thing', 200, {}, /no such operation/);
    bad('POST', '/ip_policies/ipp_' + ID, 200, {}, /no such operation/);
    ok('DELETE', '/ip_policies/ipp_' + ID, 204);
    bad('DELETE', '/ip_policies/ipp_' + ID, 204, {}, /documents no body/);
    bad('GET', '/ip_policies/ipp_' + ID, 201, policy(), /documents no 201/);
  });

  it('checks the error shape and status_code', () => {
    const err = { error_code: 'ERR_NGROK_404', status_code: 404, msg: 'Resource not found', details: { operation_id: 'op_' + ID } };
    ok('GET', '/anything', 404, err);
    ok('GET', '/anything', 400, { ...err, status_code: 400, details: { ...err.details, field: 'cidr' } });
    bad('GET', '/anything', 400, err, /differs from the HTTP status/);
    bad('GET', '/anything', 404, { ...err, details: {} }, /operation_id/);
    bad('GET', '/anything', 404, { ...err, details: { ...err.details, extra: 'x' } });
    bad('GET', '/anything', 404, 'not json', /not JSON/);
  });

  it('every deviation names a real schema and property, and is needed', () => {
    const schemas = v.doc.components.schemas;
    for (const g of deviations.nullable) {
      for (const [s, props] of Object.entries(g.where)) {
        assert.ok(schemas[s], `nullable: no schema ${s}`);
        for (const p of props) assert.ok(schemas[s].properties[p], `nullable: ${s} has no property ${p}`);
      }
    }
    for (const [s, props] of Object.entries(deviations.extraProperties)) {
      assert.ok(schemas[s], `extraProperties: no schema ${s}`);
      for (const p of Object.keys(props)) assert.equal(schemas[s].properties[p], undefined, `extraProperties: ${s}.${p} is in the file`);
    }
    for (const op of deviations.extraOperations) {
      assert.equal(v.doc.paths[op.path] && v.doc.paths[op.path][op.method.toLowerCase()], undefined, `extraOperations: ${op.method} ${op.path} is in the file`);
    }
  });
});
