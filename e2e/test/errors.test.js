'use strict';
// The client's error object carries edgeplane's error: errorCode, statusCode, msg and details
// (a Map). The client renames the keys of details (operation_id -> operationId; see docs/api.md);
// a raw request shows the server's own keys.

const { describe, it } = require('node:test');
const assert = require('node:assert/strict');
const h = require('../lib/harness');

const ng = h.client();
const MISSING = 'ipp_' + '0'.repeat(27);

// rejection awaits a promise that must reject and returns the rejection.
async function rejection(promise) {
  try {
    await promise;
  } catch (err) {
    return err;
  }
  assert.fail('the call succeeded');
}

describe('errors through the client', () => {
  it('404: a missing object', async () => {
    const err = await rejection(ng.ipPolicies.get(MISSING));
    assert.equal(err.errorCode, 'ERR_NGROK_404');
    assert.equal(err.statusCode, 404);
    assert.equal(err.msg, 'Resource not found');
    assert.ok(err.details instanceof Map, 'details is a Map');
    assert.match(err.details.get('operationId'), h.idRE('op'));
    // The key the server sent is operation_id; the client renamed it.
    assert.equal(err.details.get('operation_id'), undefined);

    const raw = await h.raw('GET', `/ip_policies/${MISSING}`);
    assert.equal(raw.status, 404);
    assert.deepEqual(Object.keys(raw.json).sort(), ['details', 'error_code', 'msg', 'status_code']);
    assert.deepEqual(Object.keys(raw.json.details), ['operation_id']);
    assert.equal(raw.headers.get('ngrok-operation-id'), raw.json.details.operation_id);
  });

  it('404 from update and delete of a missing object', async () => {
    const upd = await rejection(ng.ipPolicies.update({ id: MISSING, description: 'x' }));
    assert.equal(upd.statusCode, 404);
    assert.equal(upd.errorCode, 'ERR_NGROK_404');
    // An error status is parsed as an error, so delete() reports a 404 properly.
    const del = await rejection(ng.ipPolicies.delete(MISSING));
    assert.equal(del.statusCode, 404);
    assert.equal(del.errorCode, 'ERR_NGROK_404');
  });

  it('400: an invalid value names the field', async () => {
    const p = await ng.ipPolicies.create({});
    const err = await rejection(ng.ipPolicyRules.create({ ipPolicyId: p.id, cidr: '10.0.0.1/8', action: 'allow' }));
    assert.equal(err.errorCode, 'ERR_NGROK_1406');
    assert.equal(err.statusCode, 400);
    assert.match(err.msg, /did you mean "10\.0\.0\.0\/8"/);
    assert.equal(err.details.get('field'), 'cidr');
    assert.match(err.details.get('operationId'), h.idRE('op'));
    await h.rawDelete(`/ip_policies/${p.id}`);
  });

  it('400: an unknown field (the client sends what it is given, in snake case)', async () => {
    const err = await rejection(ng.ipPolicies.create({ description: 'x', colourScheme: 'blue' }));
    assert.equal(err.errorCode, 'ERR_NGROK_214');
    assert.equal(err.statusCode, 400);
    assert.match(err.msg, /colour_scheme/);
  });

  it('400: a required value missing', async () => {
    const err = await rejection(ng.botUsers.create({}));
    assert.equal(err.statusCode, 400);
    assert.equal(err.errorCode, 'ERR_NGROK_215');
    assert.equal(err.details.get('field'), 'name');
  });

  it('409: a domain reserved twice', async () => {
    const name = h.freshDomain('dup');
    const d = await ng.reservedDomains.create({ domain: name, region: '' });
    const err = await rejection(ng.reservedDomains.create({ domain: name, region: '' }));
    assert.equal(err.statusCode, 409);
    assert.equal(err.errorCode, 'ERR_NGROK_413');
    await h.rawDelete(`/reserved_domains/${d.id}`);
  });

  it('401: an unknown token', async () => {
    const bad = h.client('3MPvW0lhhsKGYY3Wa2DA32KAzhn_' + 'A'.repeat(52));
    const err = await rejection(bad.ipPolicies.list());
    assert.equal(err.statusCode, 401);
    assert.equal(err.errorCode, 'ERR_NGROK_203');
  });
});
