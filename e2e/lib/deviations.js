'use strict';
// Where edgeplane's responses deliberately differ from the strict reading of the published schema
// (see schema.js for that reading). The validator tolerates these entries and nothing else, and
// the "Compatibility" section of docs/api.md shows each as one row of its table:
// test/readme.test.js checks that every row of markdownRows() is in docs/api.md verbatim.

// nullable groups: where null is sent although the schema has no `nullable` (OpenAPI 3.0 needs
// it for null to be valid). `where` lists schema -> properties; `label`, when set, is how
// docs/api.md names them.
const nullable = [
  {
    where: {
      TLSEdge: ['backend', 'ip_restriction', 'mutual_tls', 'tls_termination', 'traffic_policy'],
      HTTPSEdge: ['mutual_tls', 'tls_termination'],
      TCPEdge: ['backend', 'ip_restriction', 'traffic_policy'],
      HTTPSEdgeRoute: ['backend', 'ip_restriction', 'circuit_breaker', 'compression', 'request_headers',
        'response_headers', 'webhook_verification', 'oauth', 'saml', 'oidc', 'websocket_tcp_converter',
        'user_agent_filter', 'traffic_policy'],
    },
    sent: '`null` when the module is not configured',
    why: 'the schema\'s text: "module configuration or `null`"',
  },
  {
    where: {
      APIKeyList: ['next_page_uri'], CredentialList: ['next_page_uri'], BotUserList: ['next_page_uri'],
      IPPolicyList: ['next_page_uri'], IPPolicyRuleList: ['next_page_uri'], ReservedDomainList: ['next_page_uri'],
      ReservedAddrList: ['next_page_uri'], TLSCertificateList: ['next_page_uri'], CertificateAuthorityList: ['next_page_uri'],
      SSHCertificateAuthorityList: ['next_page_uri'], SSHUserCertificateList: ['next_page_uri'], SSHHostCertificateList: ['next_page_uri'],
      TunnelGroupBackendList: ['next_page_uri'], StaticBackendList: ['next_page_uri'], HTTPResponseBackendList: ['next_page_uri'],
      FailoverBackendList: ['next_page_uri'], WeightedBackendList: ['next_page_uri'],
      TLSEdgeList: ['next_page_uri'], HTTPSEdgeList: ['next_page_uri'], TCPEdgeList: ['next_page_uri'],
    },
    label: 'every list schema (`APIKeyList` … `TCPEdgeList`, 20 of them): `next_page_uri`',
    sent: '`null` on the last page',
    why: 'the schema\'s text: "URI of the next page, or null if there is no next page"',
  },
  {
    where: { APIKey: ['token'], Credential: ['token'] },
    sent: '`null` except in the create response',
    why: 'the schema\'s text: "only available one time, on the API response from key creation. Otherwise it is null"',
  },
  {
    where: { TLSCertificate: ['issued_at'] },
    sent: '`null` (uploaded certificates)',
    why: 'the schema\'s text: "or null if this certificate was user-uploaded"',
  },
  {
    where: {
      ReservedDomain: ['cname_target', 'certificate', 'certificate_management_policy', 'certificate_management_status', 'acme_challenge_cname_target'],
      ReservedDomainCertStatus: ['provisioning_job'],
    },
    sent: '`null` when not applicable',
    why: 'the schema\'s text for each: "or null if …" (a service subdomain, no certificate, management disabled, not a wildcard custom domain, no job)',
  },
  {
    where: { EndpointTLSTermination: ['min_version'] },
    sent: '`null` with `terminate_at: "upstream"`',
    why: 'the schema\'s text: "This value must be null if `terminate_at` is set to `upstream`"',
  },
  {
    where: { ReservedDomainCertStatus: ['renews_at'], ReservedDomainCertJob: ['error_code', 'retries_at'] },
    sent: '`null` while nothing is issued, failing or scheduled',
    why: '`renews_at` is set once a certificate is issued; `error_code` while a job fails; `retries_at` only for `INTERNAL_ERROR` (a `DNS_ERROR` waits for the user); null says "none" without inventing a time',
  },
  {
    where: {
      EndpointOAuthProvider: ['github', 'facebook', 'microsoft', 'google', 'linkedin', 'gitlab', 'twitch', 'amazon'],
    },
    sent: '`null` for every provider but the configured one',
    why: 'exactly one provider is configured; the others are absent in meaning, and every field is always rendered',
  },
  {
    where: {
      EndpointOAuthGitHub: ['client_secret'], EndpointOAuthFacebook: ['client_secret'], EndpointOAuthMicrosoft: ['client_secret'],
      EndpointOAuthGoogle: ['client_secret'], EndpointOAuthLinkedIn: ['client_secret'], EndpointOAuthGitLab: ['client_secret'],
      EndpointOAuthTwitch: ['client_secret'], EndpointOAuthAmazon: ['client_secret'], EndpointOIDC: ['client_secret'],
    },
    label: 'the eight OAuth provider schemas (`EndpointOAuthGitHub` … `EndpointOAuthAmazon`) and EndpointOIDC: `client_secret`',
    sent: 'always `null`: the secret is write-only (the compatible API returns it as given)',
    why: 'client secrets are encrypted at rest and never returned, so that no read of the API shows one; a PUT or PATCH that leaves it out keeps the stored one for the same provider (or issuer) and `client_id`, so a client can send back the module it read',
  },
];

// extraProperties: schema -> property -> { schema, sent, why }: fields edgeplane renders that the
// file does not have.
const extraProperties = {
  HTTPSEdgeRoute: {
    jwt_validation: {
      schema: { anyOf: [{ type: 'null' }, { type: 'object' }] },
      sent: 'the JWT validation module, `null` when not configured',
      why: 'a route module (`…/routes/{id}/jwt_validation`) the file does not describe',
    },
  },
  ReservedDomain: {
    http_endpoint_configuration: {
      schema: { type: 'null' },
      sent: 'always `null`',
      why: 'the Edge Ingress API\'s specification lists it ("endpoint configuration for plain HTTP, or null"), this file does not; edgeplane offers no endpoint configurations',
    },
    https_endpoint_configuration: {
      schema: { type: 'null' },
      sent: 'always `null`',
      why: 'as `http_endpoint_configuration`',
    },
  },
};

// extraSchemas are JSON Schemas of responses the file has no schema for.
const extraSchemas = {
  EdgeplaneHTTPSEdgeRouteList: {
    type: 'object',
    properties: {
      routes: { type: 'array', items: { $ref: 'ngrok-openapi#/definitions/HTTPSEdgeRoute' } },
      uri: { type: 'string' },
      next_page_uri: { anyOf: [{ type: 'string' }, { type: 'null' }] },
    },
    required: ['routes', 'uri', 'next_page_uri'],
    additionalProperties: false,
  },
};

// extraOperations are operations edgeplane serves that the file does not have.
const extraOperations = [
  {
    method: 'GET', path: '/edges/https/{edge_id}/routes', status: 200, schema: 'EdgeplaneHTTPSEdgeRouteList',
    operationId: 'EdgeplaneHTTPSEdgeRoutesList',
    sent: '`{"routes": [HTTPSEdgeRoute…], "uri": …, "next_page_uri": …}`',
    why: 'the file has no list of routes (the edge shows them); the generic collection code serves it',
  },
];

// errorSchema is the shape of every error: the file documents no error responses at all.
const errorSchema = {
  type: 'object',
  properties: {
    error_code: { type: 'string', pattern: '^ERR_NGROK_[0-9]+$' },
    status_code: { type: 'integer' },
    msg: { type: 'string', minLength: 1 },
    details: {
      type: 'object',
      properties: {
        operation_id: { type: 'string', pattern: '^op_[0-9A-Za-z]{27}$' },
        field: { type: 'string' },
      },
      required: ['operation_id'],
      additionalProperties: false,
    },
  },
  required: ['error_code', 'status_code', 'msg', 'details'],
  additionalProperties: false,
};

const nullableIndex = new Set();
for (const group of nullable) {
  for (const [schema, props] of Object.entries(group.where)) {
    for (const p of props) nullableIndex.add(schema + '.' + p);
  }
}

function isNullable(schema, prop) {
  return nullableIndex.has(schema + '.' + prop);
}

// markdownRows are the rows of the deviation table of docs/api.md: | where | sent | why |.
function markdownRows() {
  const rows = [];
  for (const g of nullable) {
    const where = g.label || Object.entries(g.where).map(([s, props]) => `${s}: ${props.map(p => '`' + p + '`').join(', ')}`).join('; ');
    rows.push(`| ${where} | ${g.sent} | ${g.why} |`);
  }
  for (const [s, props] of Object.entries(extraProperties)) {
    for (const [p, e] of Object.entries(props)) rows.push(`| ${s}: \`${p}\` (not in the file) | ${e.sent} | ${e.why} |`);
  }
  for (const op of extraOperations) rows.push(`| \`${op.method} ${op.path}\` (not in the file) | ${op.sent} | ${op.why} |`);
  rows.push('| every error (the file documents none) | `{"error_code", "status_code", "msg", "details": {"operation_id"[, "field"]}}` | the shape of ngrok\'s API errors; `details.field` names the field at fault (docs/decisions.md) |');
  return rows;
}

module.exports = { nullable, isNullable, extraProperties, extraSchemas, extraOperations, errorSchema, markdownRows };

if (require.main === module) console.log(markdownRows().join('\n'));
