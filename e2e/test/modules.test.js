'use strict';
// Every edge-module service of @ngrok/ngrok-api that edgeplane serves: replace (PUT, the client
// sends {"id": ..., ["edge_id": ...,] "module": {...}}), get, and delete (the client's delete()
// bug applies; the module is gone afterwards, which a raw request proves).

const { describe, it, before } = require('node:test');
const assert = require('node:assert/strict');
const h = require('../lib/harness');

const ng = h.client();
const m = ng.edgeModules;

const SAML_METADATA = '<EntityDescriptor xmlns="urn:oasis:names:tc:SAML:2.0:metadata" entityID="https://idp.example.com/metadata">' +
  '<IDPSSODescriptor protocolSupportEnumeration="urn:oasis:names:tc:SAML:2.0:protocol">' +
  '<SingleSignOnService Binding="urn:oasis:names:tc:SAML:2.0:bindings:HTTP-Redirect" Location="https://idp.example.com/sso"/>' +
  '</IDPSSODescriptor></EntityDescriptor>';

// ctx holds the objects the modules refer to and one edge of each kind with a route.
const ctx = {};

before(async () => {
  ctx.backend = await ng.backends.staticBackends.create({ address: '10.9.0.1:443' });
  ctx.policy = await ng.ipPolicies.create({ description: 'modules' });
  ctx.ca = await ng.certificateAuthorities.create({ caPem: h.fixtures().ca_pem });
  const tlsDomain = await ng.reservedDomains.create({ domain: h.freshDomain('mtls'), region: '' });
  const httpsDomain = await ng.reservedDomains.create({ domain: h.freshDomain('mhttps'), region: '' });
  const addr = await ng.reservedAddrs.create({ region: '' });
  ctx.tls = await ng.edges.edgesTls.create({ hostports: [tlsDomain.domain + ':443'] });
  ctx.https = await ng.edges.edgesHttps.create({ hostports: [httpsDomain.domain + ':443'] });
  ctx.tcp = await ng.edges.edgesTcp.create({ hostports: [addr.addr] });
  ctx.route = await ng.edges.edgesHttpsRoutes.create({ edgeId: ctx.https.id, matchType: 'path_prefix', match: '/' });
});

const ref = o => ({ id: o.id, uri: o.uri });

// Each case: the client service, the parent kind, the module's field name (also its path segment
// and its key in the parent's raw JSON), a module body for replace() and the response it should
// produce (client-side, camelCase keys).
const cases = [
  ['tlsEdgeBackendModule', 'tls', 'backend', () => ({ backendId: ctx.backend.id }), () => ({ enabled: true, backend: ref(ctx.backend) })],
  ['tlsEdgeIpRestrictionModule', 'tls', 'ip_restriction', () => ({ ipPolicyIds: [ctx.policy.id] }), () => ({ enabled: true, ipPolicies: [ref(ctx.policy)] })],
  ['tlsEdgeMutualTlsModule', 'tls', 'mutual_tls', () => ({ certificateAuthorityIds: [ctx.ca.id] }), () => ({ enabled: true, certificateAuthorities: [ref(ctx.ca)] })],
  ['tlsEdgeTlsTerminationModule', 'tls', 'tls_termination', () => ({ terminateAt: 'edge', minVersion: '1.3' }), () => ({ enabled: true, terminateAt: 'edge', minVersion: '1.3' })],
  ['httpsEdgeMutualTlsModule', 'https', 'mutual_tls', () => ({ certificateAuthorityIds: [ctx.ca.id], enabled: false }), () => ({ enabled: false, certificateAuthorities: [ref(ctx.ca)] })],
  ['httpsEdgeTlsTerminationModule', 'https', 'tls_termination', () => ({ minVersion: '1.1' }), () => ({ enabled: true, terminateAt: 'edge', minVersion: '1.1' })],
  ['tcpEdgeBackendModule', 'tcp', 'backend', () => ({ backendId: ctx.backend.id }), () => ({ enabled: true, backend: ref(ctx.backend) })],
  ['tcpEdgeIpRestrictionModule', 'tcp', 'ip_restriction', () => ({ ipPolicyIds: [ctx.policy.id] }), () => ({ enabled: true, ipPolicies: [ref(ctx.policy)] })],
  ['edgeRouteBackendModule', 'route', 'backend', () => ({ backendId: ctx.backend.id }), () => ({ enabled: true, backend: ref(ctx.backend) })],
  ['edgeRouteIpRestrictionModule', 'route', 'ip_restriction', () => ({ ipPolicyIds: [ctx.policy.id] }), () => ({ enabled: true, ipPolicies: [ref(ctx.policy)] })],
  // Header names in lower case and without "_": the client rewrites other map keys (clientbugs.test.js).
  ['edgeRouteRequestHeadersModule', 'route', 'request_headers', () => ({ add: { 'x-edge': 'edgeplane' }, remove: ['x-internal'] }), () => ({ enabled: true, add: { xEdge: 'edgeplane' }, remove: ['x-internal'] })],
  ['edgeRouteResponseHeadersModule', 'route', 'response_headers', () => ({ add: { server: 'edgeplane' }, remove: ['X-Powered-By'] }), () => ({ enabled: true, add: { server: 'edgeplane' }, remove: ['X-Powered-By'] })],
  ['edgeRouteCompressionModule', 'route', 'compression', () => ({}), () => ({ enabled: true })],
  ['edgeRouteCircuitBreakerModule', 'route', 'circuit_breaker',
    () => ({ trippedDuration: 30, rollingWindow: 60, numBuckets: 20, volumeThreshold: 50, errorThresholdPercentage: 0.25 }),
    () => ({ enabled: true, trippedDuration: 30, rollingWindow: 60, numBuckets: 20, volumeThreshold: 50, errorThresholdPercentage: 0.25 })],
  ['edgeRouteWebhookVerificationModule', 'route', 'webhook_verification', () => ({ provider: 'github', secret: 'whsec_0123456789' }), () => ({ enabled: true, provider: 'github', secret: 'whsec_0123456789' })],
  ['edgeRouteWebsocketTcpConverterModule', 'route', 'websocket_tcp_converter', () => ({ enabled: false }), () => ({ enabled: false })],
  ['edgeRouteUserAgentFilterModule', 'route', 'user_agent_filter', () => ({ allow: ['(?i)curl/.*'], deny: ['(?i)bot'] }), () => ({ enabled: true, allow: ['(?i)curl/.*'], deny: ['(?i)bot'] })],
  ['edgeRouteOAuthModule', 'route', 'oauth',
    () => ({ provider: { google: { clientId: 'cid', clientSecret: 'secret', scopes: ['openid'], emailDomains: ['example.com'] } } }),
    null],
  ['edgeRouteOidcModule', 'route', 'oidc',
    () => ({ issuer: 'https://accounts.example.com', clientId: 'cid', clientSecret: 'secret', scopes: ['openid', 'email'] }),
    null],
  ['edgeRouteSamlModule', 'route', 'saml', () => ({ idpMetadata: SAML_METADATA, authorizedGroups: ['ops'] }), null],
];

function parentPath(kind) {
  switch (kind) {
    case 'tls': return `/edges/tls/${ctx.tls.id}`;
    case 'https': return `/edges/https/${ctx.https.id}`;
    case 'tcp': return `/edges/tcp/${ctx.tcp.id}`;
    case 'route': return `/edges/https/${ctx.https.id}/routes/${ctx.route.id}`;
  }
  throw new Error(kind);
}

// item is the client's argument naming the module's parent: an edge id, or {edgeId, id}.
function item(kind) {
  if (kind === 'route') return { edgeId: ctx.https.id, id: ctx.route.id };
  return ctx[kind].id;
}

function replaceArg(kind, module) {
  if (kind === 'route') return { edgeId: ctx.https.id, id: ctx.route.id, module };
  return { id: ctx[kind].id, module };
}

describe('edge modules through the client', () => {
  for (const [service, kind, field, body, want] of cases) {
    it(`${service}: replace, get, delete`, async () => {
      const svc = m[service];
      assert.ok(svc, `the client has no edgeModules.${service}`);
      const got = await svc.replace(replaceArg(kind, body()));
      if (want) assert.deepEqual(got, want());
      else assert.equal(got.enabled, true);
      // Client secrets are write-only (docs/api.md): sent, never shown.
      if (field === 'oauth') assert.equal(got.provider.google.clientSecret, null);
      if (field === 'oidc') assert.equal(got.clientSecret, null);
      assert.deepEqual(await svc.get(item(kind)), got);

      // The parent shows the module exactly as the module's own GET does.
      const parent = await h.raw('GET', parentPath(kind));
      assert.equal(parent.status, 200);
      const direct = await h.raw('GET', parentPath(kind) + '/' + field);
      assert.deepEqual(parent.json[field], direct.json);

      await h.clientDeleteBug(svc.delete(item(kind)));
      const gone = await h.raw('GET', parentPath(kind) + '/' + field);
      assert.equal(gone.status, 404, `${field} still configured after delete: ${gone.text}`);
      assert.equal((await h.raw('GET', parentPath(kind))).json[field], null);
    });
  }

  // traffic_policy is in the schema but not in the client (which has services for an older
  // "policy" module edgeplane does not serve): raw requests, validated like everything else.
  for (const kind of ['tls', 'tcp', 'route']) {
    it(`traffic_policy on a ${kind} (raw: the client has no service for it): PUT, GET, DELETE`, async () => {
      const p = parentPath(kind) + '/traffic_policy';
      const value = '{"on_tcp_connect":[{"actions":[{"type":"deny"}]}]}';
      const put = await h.raw('PUT', p, { module: { value } });
      assert.equal(put.status, 200, put.text);
      assert.deepEqual(put.json, { enabled: true, value });
      assert.deepEqual((await h.raw('GET', p)).json, put.json);
      await h.rawDelete(p);
    });
  }

  it('a module that is not configured: the client rejects with the 404 error object', async () => {
    await assert.rejects(m.tcpEdgeBackendModule.get(ctx.tcp.id), err => {
      assert.equal(err.statusCode, 404);
      assert.equal(err.errorCode, 'ERR_NGROK_404');
      return true;
    });
  });

  it('a module set through the edge update keeps the others (PATCH replaces only what it names)', async () => {
    await m.tlsEdgeBackendModule.replace({ id: ctx.tls.id, module: { backendId: ctx.backend.id } });
    const upd = await ng.edges.edgesTls.update({ id: ctx.tls.id, ipRestriction: { ipPolicyIds: [ctx.policy.id] } });
    assert.deepEqual(upd.backend, { enabled: true, backend: ref(ctx.backend) });
    assert.deepEqual(upd.ipRestriction, { enabled: true, ipPolicies: [ref(ctx.policy)] });
    await h.rawDelete(`/edges/tls/${ctx.tls.id}/backend`);
    await h.rawDelete(`/edges/tls/${ctx.tls.id}/ip_restriction`);
  });
});
