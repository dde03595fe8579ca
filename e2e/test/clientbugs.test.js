'use strict';
// Bugs of @ngrok/ngrok-api 0.11.0, kept visible: each test shows what the client does and proves
// with a raw request that the server did what the wire format says. edgeplane does not work
// around them (docs/api.md, "Compatibility"). If a client upgrade fixes one, its test fails:
// update docs/api.md and the test.

const { describe, it } = require('node:test');
const assert = require('node:assert/strict');
const h = require('../lib/harness');

const ng = h.client();

describe('client bugs, server side asserted raw', () => {
  it('delete() rejects on the 204 with an empty body, although the object is deleted', async () => {
    const p = await ng.ipPolicies.create({ description: 'to delete' });
    const mark = h.requests.length;
    await assert.rejects(ng.ipPolicies.delete(p.id), err => {
      // node-fetch fails to parse the empty body as JSON; the client's error handler then
      // JSON.parses that message and throws a SyntaxError instead of resolving.
      assert.ok(err instanceof SyntaxError);
      assert.match(err.message, /is not valid JSON/);
      return true;
    });
    const del = h.requests.slice(mark).find(r => r.method === 'DELETE');
    assert.equal(del.status, 204, 'the server answered 204');
    assert.equal((await h.raw('GET', `/ip_policies/${p.id}`)).status, 404, 'and the object is gone');

    const q = await ng.ipPolicies.create({});
    const raw = await h.raw('DELETE', `/ip_policies/${q.id}`);
    assert.equal(raw.status, 204);
    assert.equal(raw.text, '', 'a 204 has no body, as the schema says');
  });

  it('map keys in responses are camelCased: labels, headers, SSH options, error details', async () => {
    const tg = await h.raw('POST', '/backends/tunnel_group', { labels: { team_name: 'a', 'k8s-ns': 'b' } });
    assert.equal(tg.status, 201);
    assert.deepEqual(tg.json.labels, { team_name: 'a', 'k8s-ns': 'b' }, 'the server keeps the keys');
    const got = await ng.backends.tunnelGroupBackends.get(tg.json.id);
    assert.deepEqual(got.labels, { teamName: 'a', k8sNs: 'b' }, 'the client renames them');

    const hr = await h.raw('POST', '/backends/http_response', { status_code: 200, headers: { 'x-request-id': '1' } });
    assert.deepEqual(hr.json.headers, { 'x-request-id': '1' });
    assert.deepEqual((await ng.backends.httpResponseBackends.get(hr.json.id)).headers, { xRequestId: '1' });

    const ca = await ng.sshCertificateAuthorities.create({ privateKeyType: 'ed25519' });
    const uc = await ng.sshUserCertificates.create({
      sshCertificateAuthorityId: ca.id, publicKey: h.fixtures().ssh_public_key, principals: ['ops'],
      criticalOptions: { 'force-command': '/bin/true' },
    });
    assert.deepEqual(uc.criticalOptions, { forceCommand: '/bin/true' });
    assert.deepEqual(uc.extensions, { permitPty: '', permitUserRc: '' });
    const rawCert = await h.raw('GET', `/ssh_user_certificates/${uc.id}`);
    assert.deepEqual(rawCert.json.critical_options, { 'force-command': '/bin/true' });
    assert.deepEqual(rawCert.json.extensions, { 'permit-pty': '', 'permit-user-rc': '' });

    await h.rawDelete(`/ssh_user_certificates/${uc.id}`);
    await h.rawDelete(`/ssh_certificate_authorities/${ca.id}`);
    await h.rawDelete(`/backends/tunnel_group/${tg.json.id}`);
    await h.rawDelete(`/backends/http_response/${hr.json.id}`);
  });

  it('map keys in requests are snake_cased: "Team" is sent as "_team", "X-Edge" as "_x-_edge"', async () => {
    const tg = await ng.backends.tunnelGroupBackends.create({ labels: { Team: 'a' } });
    const raw = await h.raw('GET', `/backends/tunnel_group/${tg.id}`);
    assert.deepEqual(raw.json.labels, { _team: 'a' }, 'the server stored the key it was sent');
    assert.deepEqual(tg.labels, { Team: 'a' }, 'and the client turns it back on the way in');

    const d = await ng.reservedDomains.create({ domain: h.freshDomain('bug'), region: '' });
    const edge = await ng.edges.edgesHttps.create({ hostports: [d.domain + ':443'] });
    const route = await ng.edges.edgesHttpsRoutes.create({ edgeId: edge.id, matchType: 'path_prefix', match: '/' });
    await ng.edgeModules.edgeRouteRequestHeadersModule.replace({
      edgeId: edge.id, id: route.id, module: { add: { 'X-Edge': 'edgeplane' } },
    });
    const mod = await h.raw('GET', `/edges/https/${edge.id}/routes/${route.id}/request_headers`);
    assert.deepEqual(mod.json.add, { '_x-_edge': 'edgeplane' }, 'the header the client sent is not the one it was given');

    await h.rawDelete(`/edges/https/${edge.id}`);
    await h.rawDelete(`/reserved_domains/${d.id}`);
    await h.rawDelete(`/backends/tunnel_group/${tg.id}`);
  });

  it('a Map, the type the client declares for map fields, is sent as {}', async () => {
    const tg = await ng.backends.tunnelGroupBackends.create({ labels: new Map([['edge', 'web']]) });
    const raw = await h.raw('GET', `/backends/tunnel_group/${tg.id}`);
    assert.deepEqual(raw.json.labels, {});
    await h.rawDelete(`/backends/tunnel_group/${tg.id}`);
  });

  it('weighted backends cannot be created: the backend ids (map keys) are rewritten', async () => {
    const s = await ng.backends.staticBackends.create({ address: '10.0.0.9:80' });
    await assert.rejects(ng.backends.weightedBackends.create({ backends: { [s.id]: 1 } }), err => {
      assert.equal(err.statusCode, 400);
      assert.equal(err.errorCode, 'ERR_NGROK_6501');
      // The id the server was sent: every capital letter became "_" plus its lower case.
      const mangled = s.id.replace(/[A-Z]/g, c => '_' + c.toLowerCase());
      assert.ok(err.msg.includes(mangled), err.msg);
      return true;
    });
    const w = await h.raw('POST', '/backends/weighted', { backends: { [s.id]: 1 } });
    assert.equal(w.status, 201, 'the same request sent raw succeeds');
    const got = await ng.backends.weightedBackends.get(w.json.id);
    assert.deepEqual(Object.keys(got.backends), [s.id.replace(/_(\w)/, (_, c) => c.toUpperCase())], 'and the client renames the key it reads');
    await h.rawDelete(`/backends/weighted/${w.json.id}`);
    await h.rawDelete(`/backends/static/${s.id}`);
  });

  it('a Date, the type the client declares for valid_after/valid_until, is sent as {}', async () => {
    const ca = await ng.sshCertificateAuthorities.create({ privateKeyType: 'ed25519' });
    const mark = h.requests.length;
    await assert.rejects(ng.sshHostCertificates.create({
      sshCertificateAuthorityId: ca.id, publicKey: h.fixtures().ssh_public_key, validUntil: new Date(Date.now() + 3600e3),
    }), err => {
      assert.equal(err.statusCode, 400);
      assert.equal(err.details.get('field'), 'valid_until');
      return true;
    });
    assert.equal(h.requests.slice(mark)[0].status, 400);
    await h.rawDelete(`/ssh_certificate_authorities/${ca.id}`);
  });
});
