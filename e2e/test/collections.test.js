'use strict';
// Every collection of @ngrok/ngrok-api that edgeplane serves: create, get, list, update and
// delete through the client's own services, with the server side of its delete() bug asserted by
// raw requests (see lib/harness.js clientDeleteBug).

const { describe, it } = require('node:test');
const assert = require('node:assert/strict');
const h = require('../lib/harness');

const ng = h.client();

// listedOnce asserts that the client's list() shows the object exactly once and as get() shows it.
async function listedOnce(svc, obj, ...args) {
  const all = await svc.list(...args);
  const found = all.filter(o => o.id === obj.id);
  assert.equal(found.length, 1, `list() shows ${obj.id} ${found.length} times`);
  assert.deepEqual(found[0], obj);
  const ids = all.map(o => o.id);
  assert.equal(new Set(ids).size, ids.length, 'list() returned an object twice');
}

describe('API keys', () => {
  it('create, get, list, update, delete; the token is shown once and works', async () => {
    const k = await ng.apiKeys.create({ description: 'e2e', metadata: '{"by":"e2e"}' });
    h.assertObject(k, 'ak', '/api_keys/{id}');
    assert.equal(typeof k.token, 'string');
    assert.equal(k.description, 'e2e');
    assert.equal(k.metadata, '{"by":"e2e"}');
    assert.match(k.ownerId, /^usr_/);

    const got = await ng.apiKeys.get(k.id);
    assert.equal(got.token, null, 'the token is only in the create response');
    assert.deepEqual({ ...got, token: k.token }, k);
    await listedOnce(ng.apiKeys, got);

    // The new key authenticates the client at once.
    const other = h.client(k.token);
    assert.equal((await other.apiKeys.get(k.id)).id, k.id);

    const upd = await ng.apiKeys.update({ id: k.id, description: 'e2e 2', metadata: '' });
    assert.equal(upd.description, 'e2e 2');
    assert.equal(upd.metadata, '');

    await h.deleteAndConfirm(ng.apiKeys.delete(k.id), `/api_keys/${k.id}`);
    // A deleted key is refused on the next request.
    await assert.rejects(other.ipPolicies.list(), { statusCode: 401, errorCode: 'ERR_NGROK_203' });
  });
});

describe('credentials', () => {
  it('create, get, list, update, delete', async () => {
    const c = await ng.credentials.create({ description: 'agent', acl: ['bind:*.example.com', 'bind:edge=web'] });
    h.assertObject(c, 'cr', '/credentials/{id}');
    assert.equal(typeof c.token, 'string');
    assert.deepEqual(c.acl, ['bind:*.example.com', 'bind:edge=web']);
    const got = await ng.credentials.get(c.id);
    assert.equal(got.token, null);
    await listedOnce(ng.credentials, got);
    const upd = await ng.credentials.update({ id: c.id, acl: ['bind:app.example.com'] });
    assert.deepEqual(upd.acl, ['bind:app.example.com']);
    assert.equal(upd.description, 'agent', 'an absent field is left unchanged');
    await h.deleteAndConfirm(ng.credentials.delete(c.id), `/credentials/${c.id}`);
  });
});

describe('bot users', () => {
  it('create, get, list, update, delete', async () => {
    const b = await ng.botUsers.create({ name: 'deployer-' + h.unique() });
    h.assertObject(b, 'bot', '/bot_users/{id}');
    assert.equal(b.active, true);
    assert.deepEqual(await ng.botUsers.get(b.id), b);
    await listedOnce(ng.botUsers, b);
    const upd = await ng.botUsers.update({ id: b.id, active: false });
    assert.equal(upd.active, false);
    assert.equal(upd.name, b.name);
    await h.deleteAndConfirm(ng.botUsers.delete(b.id), `/bot_users/${b.id}`);
  });
});

describe('IP policies and rules', () => {
  it('create, get, list, update, delete', async () => {
    const p = await ng.ipPolicies.create({ description: 'office', metadata: 'm' });
    h.assertObject(p, 'ipp', '/ip_policies/{id}');
    assert.deepEqual(await ng.ipPolicies.get(p.id), p);
    await listedOnce(ng.ipPolicies, p);

    const r = await ng.ipPolicyRules.create({ ipPolicyId: p.id, cidr: '10.1.0.0/16', action: 'allow', description: 'lan' });
    h.assertObject(r, 'ipr', '/ip_policy_rules/{id}');
    assert.deepEqual(r.ipPolicy, { id: p.id, uri: p.uri });
    assert.equal(r.cidr, '10.1.0.0/16');
    assert.equal(r.action, 'allow');
    assert.deepEqual(await ng.ipPolicyRules.get(r.id), r);
    await listedOnce(ng.ipPolicyRules, r);
    const ru = await ng.ipPolicyRules.update({ id: r.id, cidr: '2001:db8::/32' });
    assert.equal(ru.cidr, '2001:db8::/32');
    assert.equal(ru.description, 'lan');

    const pu = await ng.ipPolicies.update({ id: p.id, description: 'office 2' });
    assert.equal(pu.description, 'office 2');
    assert.equal(pu.metadata, 'm');

    await h.deleteAndConfirm(ng.ipPolicyRules.delete(r.id), `/ip_policy_rules/${r.id}`);
    await h.deleteAndConfirm(ng.ipPolicies.delete(p.id), `/ip_policies/${p.id}`);
  });
});

describe('reserved domains', () => {
  it('create, get, list, update, detach certificate and policy, delete', async () => {
    const f = h.fixtures();
    const name = h.freshDomain('rd');
    const d = await ng.reservedDomains.create({ domain: name, region: 'eu', description: 'web' });
    h.assertObject(d, 'rd', '/reserved_domains/{id}');
    assert.equal(d.domain, name);
    assert.equal(d.region, 'eu');
    assert.equal(typeof d.cnameTarget, 'string');
    assert.equal(d.certificate, null);
    assert.equal(d.certificateManagementPolicy, null);
    assert.deepEqual(await ng.reservedDomains.get(d.id), d);
    await listedOnce(ng.reservedDomains, d);

    const withPolicy = await ng.reservedDomains.update({
      id: d.id, certificateManagementPolicy: { authority: 'letsencrypt', privateKeyType: 'ecdsa' },
    });
    assert.deepEqual(withPolicy.certificateManagementPolicy, { authority: 'letsencrypt', privateKeyType: 'ecdsa' });
    assert.equal(typeof withPolicy.certificateManagementStatus.provisioningJob.msg, 'string');
    await h.clientDeleteBug(ng.reservedDomains.deleteCertificateManagementPolicy(d.id));
    let raw = await h.raw('GET', `/reserved_domains/${d.id}`);
    assert.equal(raw.json.certificate_management_policy, null);

    const cert = await ng.tlsCertificates.create({ certificatePem: f.certificate_pem, privateKeyPem: f.private_key_pem });
    const withCert = await ng.reservedDomains.update({ id: d.id, certificateId: cert.id });
    assert.deepEqual(withCert.certificate, { id: cert.id, uri: cert.uri });
    await h.clientDeleteBug(ng.reservedDomains.deleteCertificate(d.id));
    raw = await h.raw('GET', `/reserved_domains/${d.id}`);
    assert.equal(raw.json.certificate, null);
    assert.equal(raw.json.description, 'web');

    await h.deleteAndConfirm(ng.reservedDomains.delete(d.id), `/reserved_domains/${d.id}`);
    await h.rawDelete(`/tls_certificates/${cert.id}`);
  });

  it('a service subdomain has no CNAME target; a wildcard custom domain has an ACME one', async () => {
    const sub = await ng.reservedDomains.create({ domain: `e2e-${h.unique()}.edgeplane.app`, region: '' });
    assert.equal(sub.cnameTarget, null);
    assert.equal(sub.acmeChallengeCnameTarget, null);
    const wild = await ng.reservedDomains.create({ domain: '*.' + h.freshDomain('wild'), region: '' });
    assert.equal(typeof wild.cnameTarget, 'string');
    assert.equal(typeof wild.acmeChallengeCnameTarget, 'string');
    await h.deleteAndConfirm(ng.reservedDomains.delete(sub.id), `/reserved_domains/${sub.id}`);
    await h.rawDelete(`/reserved_domains/${wild.id}`);
  });
});

describe('reserved addresses', () => {
  it('create, get, list, update, delete', async () => {
    const a = await ng.reservedAddrs.create({ description: 'db', region: 'us' });
    h.assertObject(a, 'ra', '/reserved_addrs/{id}');
    assert.match(a.addr, /^[a-z0-9.-]+:\d+$/);
    assert.deepEqual(await ng.reservedAddrs.get(a.id), a);
    await listedOnce(ng.reservedAddrs, a);
    const upd = await ng.reservedAddrs.update({ id: a.id, description: 'db 2', metadata: 'm' });
    assert.equal(upd.description, 'db 2');
    assert.equal(upd.addr, a.addr);
    await h.deleteAndConfirm(ng.reservedAddrs.delete(a.id), `/reserved_addrs/${a.id}`);
  });
});

describe('TLS certificates and certificate authorities', () => {
  it('TLS certificate: create, get, list, update, delete', async () => {
    const f = h.fixtures();
    const c = await ng.tlsCertificates.create({ certificatePem: f.certificate_pem, privateKeyPem: f.private_key_pem, description: 'web' });
    h.assertObject(c, 'cert', '/tls_certificates/{id}');
    assert.equal(c.subjectCommonName, 'app.example.com');
    assert.deepEqual(c.subjectAlternativeNames.dnsNames, ['app.example.com', 'www.example.com']);
    assert.equal(c.privateKeyType, 'ecdsa');
    assert.equal(c.issuerCommonName, 'edgeplane e2e CA');
    assert.equal(c.privateKeyPem, undefined, 'the private key is never returned');
    assert.deepEqual(await ng.tlsCertificates.get(c.id), c);
    await listedOnce(ng.tlsCertificates, c);
    const upd = await ng.tlsCertificates.update({ id: c.id, description: 'web 2', metadata: 'm' });
    assert.equal(upd.description, 'web 2');
    await h.deleteAndConfirm(ng.tlsCertificates.delete(c.id), `/tls_certificates/${c.id}`);
  });

  it('certificate authority: create, get, list, update, delete', async () => {
    const ca = await ng.certificateAuthorities.create({ caPem: h.fixtures().ca_pem, description: 'clients' });
    h.assertObject(ca, 'ca', '/certificate_authorities/{id}');
    assert.equal(ca.subjectCommonName, 'edgeplane e2e CA');
    assert.ok(ca.keyUsages.includes('cert_sign'));
    assert.deepEqual(await ng.certificateAuthorities.get(ca.id), ca);
    await listedOnce(ng.certificateAuthorities, ca);
    const upd = await ng.certificateAuthorities.update({ id: ca.id, metadata: 'm' });
    assert.equal(upd.metadata, 'm');
    assert.equal(upd.description, 'clients');
    await h.deleteAndConfirm(ng.certificateAuthorities.delete(ca.id), `/certificate_authorities/${ca.id}`);
  });
});

describe('SSH certificate authorities and certificates', () => {
  it('create, get, list, update, delete each', async () => {
    const f = h.fixtures();
    const ca = await ng.sshCertificateAuthorities.create({ privateKeyType: 'ecdsa', ellipticCurve: 'p256', description: 'ops' });
    h.assertObject(ca, 'sshca', '/ssh_certificate_authorities/{id}');
    assert.match(ca.publicKey, /^ecdsa-sha2-nistp256 /);
    assert.equal(ca.keyType, 'ecdsa');
    assert.deepEqual(await ng.sshCertificateAuthorities.get(ca.id), ca);
    await listedOnce(ng.sshCertificateAuthorities, ca);
    assert.equal((await ng.sshCertificateAuthorities.update({ id: ca.id, description: 'ops 2' })).description, 'ops 2');

    // validAfter/validUntil are typed Date but the client serialises a Date as {} (see docs/api.md),
    // so they are given as RFC 3339 strings.
    const validUntil = new Date(Date.now() + 3600e3).toISOString().replace(/\.\d+Z$/, 'Z');
    const uc = await ng.sshUserCertificates.create({
      sshCertificateAuthorityId: ca.id, publicKey: f.ssh_public_key, principals: ['deploy'],
      criticalOptions: { 'source-address': '10.0.0.0/8' }, extensions: { 'permit-pty': '' }, validUntil,
    });
    h.assertObject(uc, 'sucrt', '/ssh_user_certificates/{id}');
    assert.deepEqual(uc.principals, ['deploy']);
    assert.equal(uc.validUntil, validUntil);
    assert.match(uc.certificate, /^ssh-ed25519-cert-v01@openssh.com /);
    assert.deepEqual(await ng.sshUserCertificates.get(uc.id), uc);
    await listedOnce(ng.sshUserCertificates, uc);
    assert.equal((await ng.sshUserCertificates.update({ id: uc.id, description: 'u' })).description, 'u');

    const hc = await ng.sshHostCertificates.create({ sshCertificateAuthorityId: ca.id, publicKey: f.ssh_public_key, principals: ['db.internal'] });
    h.assertObject(hc, 'shcrt', '/ssh_host_certificates/{id}');
    assert.deepEqual(await ng.sshHostCertificates.get(hc.id), hc);
    await listedOnce(ng.sshHostCertificates, hc);
    assert.equal((await ng.sshHostCertificates.update({ id: hc.id, metadata: 'm' })).metadata, 'm');

    // The CA is refused while it has certificates (409), through the client's error object.
    await assert.rejects(ng.sshCertificateAuthorities.delete(ca.id), { statusCode: 409, errorCode: 'ERR_NGROK_1964' });
    await h.deleteAndConfirm(ng.sshUserCertificates.delete(uc.id), `/ssh_user_certificates/${uc.id}`);
    await h.deleteAndConfirm(ng.sshHostCertificates.delete(hc.id), `/ssh_host_certificates/${hc.id}`);
    await h.deleteAndConfirm(ng.sshCertificateAuthorities.delete(ca.id), `/ssh_certificate_authorities/${ca.id}`);
  });
});

describe('backends', () => {
  const b = ng.backends;

  it('static: create, get, list, update, delete', async () => {
    const s = await b.staticBackends.create({ address: '10.0.0.1:8080', tls: { enabled: true }, description: 's' });
    h.assertObject(s, 'bkdsa', '/backends/static/{id}');
    assert.deepEqual(s.tls, { enabled: true });
    assert.deepEqual(await b.staticBackends.get(s.id), s);
    await listedOnce(b.staticBackends, s);
    const upd = await b.staticBackends.update({ id: s.id, address: 'app.internal:443' });
    assert.equal(upd.address, 'app.internal:443');
    assert.deepEqual(upd.tls, { enabled: true });
    await h.deleteAndConfirm(b.staticBackends.delete(s.id), `/backends/static/${s.id}`);
  });

  it('tunnel group: create, get, list, update, delete', async () => {
    // Label keys without capitals or "_x"/"-x" survive the client's key conversion (see docs/api.md).
    const tg = await b.tunnelGroupBackends.create({ labels: { edge: 'web', dc: 'eu1' }, description: 'tg' });
    h.assertObject(tg, 'bkdtg', '/backends/tunnel_group/{id}');
    assert.deepEqual(tg.labels, { edge: 'web', dc: 'eu1' });
    assert.deepEqual(tg.tunnels, []);
    assert.deepEqual(await b.tunnelGroupBackends.get(tg.id), tg);
    await listedOnce(b.tunnelGroupBackends, tg);
    const upd = await b.tunnelGroupBackends.update({ id: tg.id, labels: { edge: 'api' } });
    assert.deepEqual(upd.labels, { edge: 'api' });
    await h.deleteAndConfirm(b.tunnelGroupBackends.delete(tg.id), `/backends/tunnel_group/${tg.id}`);
  });

  it('http response: create, get, list, update, delete', async () => {
    const hr = await b.httpResponseBackends.create({ statusCode: 503, body: 'down', headers: { server: 'edgeplane' } });
    h.assertObject(hr, 'bkdhr', '/backends/http_response/{id}');
    assert.equal(hr.statusCode, 503);
    assert.deepEqual(hr.headers, { server: 'edgeplane' });
    assert.deepEqual(await b.httpResponseBackends.get(hr.id), hr);
    await listedOnce(b.httpResponseBackends, hr);
    const upd = await b.httpResponseBackends.update({ id: hr.id, statusCode: 200, body: 'up' });
    assert.equal(upd.statusCode, 200);
    assert.equal(upd.body, 'up');
    await h.deleteAndConfirm(b.httpResponseBackends.delete(hr.id), `/backends/http_response/${hr.id}`);
  });

  it('failover: create, get, list, update, delete', async () => {
    const s1 = await b.staticBackends.create({ address: '10.0.0.1:80' });
    const s2 = await b.staticBackends.create({ address: '10.0.0.2:80' });
    const fo = await b.failoverBackends.create({ backends: [s1.id, s2.id], description: 'fo' });
    h.assertObject(fo, 'bkdfo', '/backends/failover/{id}');
    assert.deepEqual(fo.backends, [s1.id, s2.id]);
    assert.deepEqual(await b.failoverBackends.get(fo.id), fo);
    await listedOnce(b.failoverBackends, fo);
    const upd = await b.failoverBackends.update({ id: fo.id, backends: [s2.id, s1.id] });
    assert.deepEqual(upd.backends, [s2.id, s1.id]);
    // A referenced backend cannot be deleted: 409 through the client's error object.
    await assert.rejects(b.staticBackends.delete(s1.id), { statusCode: 409, errorCode: 'ERR_NGROK_6502' });
    await h.deleteAndConfirm(b.failoverBackends.delete(fo.id), `/backends/failover/${fo.id}`);
    await h.rawDelete(`/backends/static/${s1.id}`);
    await h.rawDelete(`/backends/static/${s2.id}`);
  });

  it('weighted: create (raw), get, list, update, delete', async () => {
    // The client cannot create a weighted backend that names a backend: the map's keys are ids,
    // which it rewrites (see clientbugs.test.js). Created with a raw request; everything else
    // goes through the client.
    const s = await b.staticBackends.create({ address: '10.0.0.3:80' });
    const created = await h.raw('POST', '/backends/weighted', { backends: { [s.id]: 3 }, description: 'w' });
    assert.equal(created.status, 201, created.text);
    const id = created.json.id;
    const w = await b.weightedBackends.get(id);
    h.assertObject(w, 'bkdwd', '/backends/weighted/{id}');
    assert.equal(w.description, 'w');
    await listedOnce(b.weightedBackends, w);
    const upd = await b.weightedBackends.update({ id, description: 'w2' });
    assert.equal(upd.description, 'w2');
    const after = await h.raw('GET', `/backends/weighted/${id}`);
    assert.deepEqual(after.json.backends, { [s.id]: 3 }, 'an update without backends keeps them');
    await h.deleteAndConfirm(b.weightedBackends.delete(id), `/backends/weighted/${id}`);
    await h.rawDelete(`/backends/static/${s.id}`);
  });
});

describe('edges and routes', () => {
  const e = ng.edges;

  it('TLS edge: create, get, list, update, delete', async () => {
    const d = await ng.reservedDomains.create({ domain: h.freshDomain('tls'), region: '' });
    const s = await ng.backends.staticBackends.create({ address: '10.0.0.1:443' });
    const edge = await e.edgesTls.create({
      hostports: [d.domain + ':443'], description: 'tls',
      backend: { backendId: s.id }, tlsTermination: { terminateAt: 'upstream' },
    });
    h.assertObject(edge, 'edgtls', '/edges/tls/{id}');
    assert.deepEqual(edge.hostports, [d.domain + ':443']);
    assert.deepEqual(edge.backend, { enabled: true, backend: { id: s.id, uri: s.uri } });
    assert.deepEqual(edge.tlsTermination, { enabled: true, terminateAt: 'upstream', minVersion: null });
    assert.equal(edge.ipRestriction, null);
    assert.deepEqual(await e.edgesTls.get(edge.id), edge);
    await listedOnce(e.edgesTls, edge);
    const upd = await e.edgesTls.update({ id: edge.id, description: 'tls 2', tlsTermination: { terminateAt: 'edge', minVersion: '1.3' } });
    assert.equal(upd.description, 'tls 2');
    assert.deepEqual(upd.tlsTermination, { enabled: true, terminateAt: 'edge', minVersion: '1.3' });
    assert.deepEqual(upd.backend, edge.backend, 'PATCH keeps modules it does not name');
    await h.deleteAndConfirm(e.edgesTls.delete(edge.id), `/edges/tls/${edge.id}`);
    await h.rawDelete(`/backends/static/${s.id}`);
    await h.rawDelete(`/reserved_domains/${d.id}`);
  });

  it('TCP edge: create, get, list, update, delete', async () => {
    const a = await ng.reservedAddrs.create({ region: '' });
    const edge = await e.edgesTcp.create({ hostports: [a.addr], description: 'tcp' });
    h.assertObject(edge, 'edgtcp', '/edges/tcp/{id}');
    assert.deepEqual(edge.hostports, [a.addr]);
    assert.deepEqual(await e.edgesTcp.get(edge.id), edge);
    await listedOnce(e.edgesTcp, edge);
    const upd = await e.edgesTcp.update({ id: edge.id, metadata: 'm' });
    assert.equal(upd.metadata, 'm');
    assert.deepEqual(upd.hostports, [a.addr]);
    await h.deleteAndConfirm(e.edgesTcp.delete(edge.id), `/edges/tcp/${edge.id}`);
    await h.rawDelete(`/reserved_addrs/${a.id}`);
  });

  it('HTTPS edge and routes: create, get, list, update, delete', async () => {
    const d = await ng.reservedDomains.create({ domain: h.freshDomain('https'), region: '' });
    const edge = await e.edgesHttps.create({ hostports: [d.domain + ':443'], tlsTermination: { minVersion: '1.3' } });
    h.assertObject(edge, 'edghts', '/edges/https/{id}');
    assert.deepEqual(edge.routes, []);
    assert.deepEqual(edge.tlsTermination, { enabled: true, terminateAt: 'edge', minVersion: '1.3' });
    assert.deepEqual(await e.edgesHttps.get(edge.id), edge);
    await listedOnce(e.edgesHttps, edge);

    const r = await e.edgesHttpsRoutes.create({ edgeId: edge.id, matchType: 'path_prefix', match: '/api', description: 'api', compression: {} });
    h.assertObject(r, 'edghtsrt', `/edges/https/${edge.id}/routes/{id}`);
    assert.equal(r.edgeId, edge.id);
    assert.deepEqual(r.compression, { enabled: true });
    assert.equal(r.backend, null);
    assert.deepEqual(await e.edgesHttpsRoutes.get({ edgeId: edge.id, id: r.id }), r);
    const ru = await e.edgesHttpsRoutes.update({ edgeId: edge.id, id: r.id, matchType: 'exact_path', match: '/api/v2' });
    assert.equal(ru.matchType, 'exact_path');
    assert.equal(ru.match, '/api/v2');
    assert.deepEqual(ru.compression, { enabled: true });

    // The edge shows its routes; edgeplane's extra route list shows them too (raw: the client has none).
    const withRoute = await e.edgesHttps.get(edge.id);
    assert.deepEqual(withRoute.routes, [ru]);
    const list = await h.raw('GET', `/edges/https/${edge.id}/routes`);
    assert.equal(list.status, 200);
    assert.deepEqual(list.json.routes.map(x => x.id), [r.id]);
    assert.equal(list.json.next_page_uri, null);

    const eu = await e.edgesHttps.update({ id: edge.id, description: 'https 2' });
    assert.equal(eu.description, 'https 2');
    assert.equal(eu.routes.length, 1);

    await h.deleteAndConfirm(e.edgesHttpsRoutes.delete({ edgeId: edge.id, id: r.id }), `/edges/https/${edge.id}/routes/${r.id}`);
    const r2 = await e.edgesHttpsRoutes.create({ edgeId: edge.id, matchType: 'path_prefix', match: '/' });
    await h.deleteAndConfirm(e.edgesHttps.delete(edge.id), `/edges/https/${edge.id}`);
    const gone = await h.raw('GET', `/edges/https/${edge.id}/routes/${r2.id}`);
    assert.equal(gone.status, 404, 'a route is deleted with its edge');
    await h.rawDelete(`/reserved_domains/${d.id}`);
  });
});
