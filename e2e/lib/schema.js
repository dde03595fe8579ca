'use strict';
// Validation of every JSON response against the published schema (testdata/spec/ngrok-openapi.yaml in the repository).
//
// The schema is OpenAPI 3.0 generated from ngrok's API definitions. It marks nothing required and
// never uses `nullable`, so a plain JSON Schema validation would prove little (every object
// passes when it is empty) and would reject the nulls that the API documents in prose ("backend
// module configuration or `null`"). The profile applied here is stricter than the schema and
// then relaxed by exactly the entries of deviations.js:
//
//   - every property of an object schema is required: edgeplane renders every field;
//   - no property outside the schema is allowed (additionalProperties: false);
//   - null is allowed only where deviations.js says so;
//   - non-null values must have the schema's type (integer means a whole number), recursively.
//
// Maps (`type: object` without properties: labels, headers, weighted backends) stay open, as in the
// schema. Errors have no schema in the file; they are checked against edgeplane's documented error
// shape (deviations.errorSchema).

const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');
const YAML = require('yaml');
const Ajv = require('ajv');
const deviations = require('./deviations');

const SPEC_ID = 'ngrok-openapi';

function specPath() {
  return process.env.EDGEPLANE_E2E_SPEC ||
    path.resolve(__dirname, '..', '..', 'testdata', 'spec', 'ngrok-openapi.yaml');
}

// convert turns one OpenAPI schema into the strict JSON Schema profile described above. name is
// the component schema the object belongs to (for the deviation lookups).
function convert(s, name) {
  if (s.$ref) {
    return { $ref: SPEC_ID + '#/definitions/' + refName(s.$ref) };
  }
  switch (s.type) {
    case 'object': {
      if (!s.properties) {
        // A map: the schema says nothing about its keys or values.
        return { type: 'object' };
      }
      const properties = {};
      for (const [prop, ps] of Object.entries(s.properties)) {
        let out = convert(ps, name + '.' + prop);
        if (deviations.isNullable(name, prop)) {
          out = { anyOf: [out, { type: 'null' }] };
        }
        properties[prop] = out;
      }
      for (const [prop, extra] of Object.entries(deviations.extraProperties[name] || {})) {
        properties[prop] = extra.schema;
      }
      return {
        type: 'object',
        properties,
        required: Object.keys(properties),
        additionalProperties: false,
      };
    }
    case 'array':
      return { type: 'array', items: s.items ? convert(s.items, name + '[]') : {} };
    case 'string':
    case 'integer':
    case 'number':
    case 'boolean':
      return { type: s.type };
    default:
      throw new Error(`schema ${name}: unsupported type ${JSON.stringify(s.type)}`);
  }
}

function refName(ref) {
  const prefix = '#/components/schemas/';
  if (!ref.startsWith(prefix)) throw new Error('unsupported $ref ' + ref);
  return ref.slice(prefix.length);
}

// pathRegexp matches a concrete path against an OpenAPI path template; it also returns how many
// literal segments the template has, so the most specific template wins.
function pathRegexp(template) {
  const segs = template.split('/').slice(1);
  const re = segs.map(s => (s.startsWith('{') ? '[^/]+' : s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'))).join('/');
  return { re: new RegExp('^/' + re + '$'), literal: segs.filter(s => !s.startsWith('{')).length };
}

// loadSpec parses the YAML file. Parsing 10,000 lines takes the yaml package a good part of a
// second, in every test process, so the result is cached as JSON next to node_modules, keyed by
// the file's hash (written to a temporary name and renamed: test files run in parallel).
function loadSpec(file) {
  const text = fs.readFileSync(file, 'utf8');
  const hash = crypto.createHash('sha256').update(text).digest('hex').slice(0, 16);
  const dir = path.join(__dirname, '..', 'node_modules', '.cache', 'edgeplane-e2e');
  const cached = path.join(dir, `spec-${hash}.json`);
  try {
    return JSON.parse(fs.readFileSync(cached, 'utf8'));
  } catch {
    // not cached yet (or unreadable): parse
  }
  const doc = YAML.parse(text);
  try {
    fs.mkdirSync(dir, { recursive: true });
    const tmp = `${cached}.${process.pid}.tmp`;
    fs.writeFileSync(tmp, JSON.stringify(doc));
    fs.renameSync(tmp, cached);
  } catch {
    // a cache that cannot be written only costs time
  }
  return doc;
}

class SpecValidator {
  constructor(file = specPath()) {
    if (!fs.existsSync(file)) {
      throw new Error(`the published schema is not at ${file}; set EDGEPLANE_E2E_SPEC to its path`);
    }
    this.file = file;
    this.doc = loadSpec(file);
    const definitions = {};
    for (const [name, s] of Object.entries(this.doc.components.schemas)) {
      definitions[name] = convert(s, name);
    }
    for (const [name, s] of Object.entries(deviations.extraSchemas)) {
      if (definitions[name]) throw new Error(`deviations.extraSchemas.${name} shadows a schema of the file`);
      definitions[name] = s;
    }
    this.ajv = new Ajv({ allErrors: true, strict: true });
    this.ajv.addSchema({ $id: SPEC_ID, definitions });
    this.ops = [];
    for (const [template, item] of Object.entries(this.doc.paths)) {
      for (const [method, op] of Object.entries(item)) {
        if (!op || !op.responses) continue;
        this.ops.push({ method: method.toUpperCase(), template, ...pathRegexp(template), operationId: op.operationId, responses: op.responses, documented: false });
      }
    }
    for (const extra of deviations.extraOperations) {
      const responses = { [extra.status]: { content: { 'application/json': { schema: { $ref: '#/components/schemas/' + extra.schema } } } } };
      this.ops.push({ method: extra.method, template: extra.path, ...pathRegexp(extra.path), operationId: extra.operationId, responses, documented: true });
    }
    this.errorValidator = this.ajv.compile(deviations.errorSchema);
    this.cache = new Map();
  }

  // operation finds the operation serving method and path (most literal segments win).
  operation(method, pathname) {
    let best = null;
    for (const op of this.ops) {
      if (op.method === method && op.re.test(pathname) && (!best || op.literal > best.literal)) best = op;
    }
    return best;
  }

  validatorFor(ref) {
    const name = refName(ref);
    if (!this.cache.has(name)) {
      const v = this.ajv.getSchema(SPEC_ID + '#/definitions/' + name);
      if (!v) throw new Error('no schema ' + name);
      this.cache.set(name, v);
    }
    return { name, validate: this.cache.get(name) };
  }

  // check validates one response and returns a list of problems (empty when it conforms), and the
  // operation id it was checked against.
  check(method, pathname, status, text) {
    const where = `${method} ${pathname} -> ${status}`;
    if (status >= 400) {
      let body;
      try { body = JSON.parse(text); } catch (e) { return { problems: [`${where}: error body is not JSON: ${text}`] }; }
      const problems = [];
      if (!this.errorValidator(body)) problems.push(`${where}: error body ${text} does not match the error shape: ${this.ajv.errorsText(this.errorValidator.errors)}`);
      else if (body.status_code !== status) problems.push(`${where}: status_code ${body.status_code} differs from the HTTP status`);
      return { problems, operationId: 'error' };
    }
    const op = this.operation(method, pathname);
    if (!op) return { problems: [`${where}: the schema has no such operation`] };
    const operation = `${op.method} ${op.template.replace(/\{[^}]*\}/g, '{}')}`;
    const resp = op.responses[status] || op.responses[String(status)];
    if (!resp) return { problems: [`${where}: ${op.operationId} documents no ${status} response (it documents ${Object.keys(op.responses).join(', ')})`], operationId: op.operationId };
    const schema = resp.content && resp.content['application/json'] && resp.content['application/json'].schema;
    if (!schema) {
      return { problems: text === '' ? [] : [`${where}: ${op.operationId} documents no body, got ${JSON.stringify(text)}`], operationId: op.operationId, operation };
    }
    let body;
    try { body = JSON.parse(text); } catch (e) { return { problems: [`${where}: body is not JSON: ${JSON.stringify(text)}`], operationId: op.operationId }; }
    const { name, validate } = this.validatorFor(schema.$ref);
    if (validate(body)) return { problems: [], operationId: op.operationId, operation };
    const errs = validate.errors.map(e => `${e.instancePath || '/'} ${e.message}${e.params && e.params.additionalProperty ? ' (' + e.params.additionalProperty + ')' : ''}${e.params && e.params.missingProperty ? ' (' + e.params.missingProperty + ')' : ''}`);
    return { problems: [`${where}: body does not match ${name} (${op.operationId}): ${[...new Set(errs)].join('; ')}\n  body: ${text.slice(0, 2000)}`], operationId: op.operationId };
  }
}

module.exports = { SpecValidator, convert, specPath };
