// Checks the OpenAPI document and the answers the integration tests got.
//
//   node check.mjs OPENAPI.json [ANSWERS.ndjson]
//
// 1. The document is valid OpenAPI 3.1 (@apidevtools/swagger-parser: the
//    3.1 schema, and every $ref resolves).
// 2. Every recorded answer (lines {"method","route","status","body"}, which a
//    controller writes when SANDBOXD_RECORD_RESPONSES names the file) is
//    checked against the document's schema for its path, method and status
//    (ajv, JSON Schema 2020-12, the dialect of OpenAPI 3.1): a field renamed
//    in C and not in the document, a status the document does not list for
//    that operation, or a value outside an enum fails. An error status the
//    operation does not list is checked against its `default` (the Error
//    shape); a success status must be listed. An answer of a path no route
//    has ("other"), or of a method the path lacks (405), must be an Error.
// Prints what failed (each distinct failure once, with one body) and what the
// answers covered; exits 1 when anything failed.
import { readFileSync, createReadStream, existsSync } from "node:fs";
import { createInterface } from "node:readline";
import SwaggerParser from "@apidevtools/swagger-parser";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

const [specPath, answersPath] = process.argv.slice(2);
if (!specPath) {
  console.error("usage: node check.mjs OPENAPI.json [ANSWERS.ndjson]");
  process.exit(2);
}
let failed = false;
const doc = JSON.parse(readFileSync(specPath, "utf8"));

try {
  // validate() dereferences what it is given: hand it a copy
  await SwaggerParser.validate(structuredClone(doc));
  console.log(`${specPath}: valid OpenAPI ${doc.openapi} (${Object.keys(doc.paths).length} paths)`);
} catch (e) {
  console.log(`${specPath}: NOT valid OpenAPI: ${e.message}`);
  failed = true;
}

if (answersPath) {
  if (!existsSync(answersPath)) {
    console.log(`${answersPath}: no answers were recorded (was SANDBOXD_RECORD_RESPONSES set for the controllers?)`);
    process.exit(1);
  }
  const ajv = new Ajv2020({ strict: false, allErrors: true, validateSchema: false });
  addFormats(ajv);
  ajv.addSchema(doc, "openapi.json");
  const pointer = (...parts) => parts.map((p) => String(p).replaceAll("~", "~0").replaceAll("/", "~1")).join("/");
  const validators = new Map();
  const validator = (ref) => {
    let v = validators.get(ref);
    if (!v) {
      v = ajv.compile({ $ref: `openapi.json#/${ref}` });
      validators.set(ref, v);
    }
    return v;
  };
  const errorRef = pointer("components", "schemas", "Error");

  // Which schema an answer must meet: [ref] or [null, why it has none].
  const schemaFor = (a) => {
    if (a.route === "other") return [errorRef];
    const item = doc.paths[a.route];
    if (!item) return [null, `route ${a.route} is not in the document`];
    const method = a.method === "HEAD" ? "get" : a.method.toLowerCase();
    const op = item[method];
    if (!op) return a.status === 405 ? [errorRef] : [null, `${a.method} is not documented for ${a.route}`];
    let status = String(a.status);
    if (!op.responses[status]) {
      if (a.status < 400 || !op.responses.default) return [null, `status ${a.status} is not documented`];
      status = "default";
    }
    let resp = op.responses[status];
    let base = ["paths", a.route, method, "responses", status];
    if (resp.$ref) {
      base = resp.$ref.slice(2).split("/").map((p) => p.replaceAll("~1", "/").replaceAll("~0", "~"));
      resp = base.reduce((o, k) => o[k], doc);
    }
    if (!resp.content?.["application/json"]?.schema) return [null, `status ${status} has no application/json schema`];
    return [pointer(...base, "content", "application/json", "schema")];
  };

  const seen = new Map(); // "METHOD route status" -> count
  const failures = new Map(); // distinct failure -> {count, body}
  let n = 0;
  const lines = createInterface({ input: createReadStream(answersPath), crlfDelay: Infinity });
  for await (const line of lines) {
    if (!line) continue;
    let a;
    try {
      a = JSON.parse(line);
    } catch {
      // a controller killed mid-write (the fault tests do) leaves a torn line
      continue;
    }
    n++;
    const key = `${a.method} ${a.route} ${a.status}`;
    seen.set(key, (seen.get(key) || 0) + 1);
    const [ref, why] = schemaFor(a);
    let problems;
    if (!ref) {
      problems = why;
    } else {
      const v = validator(ref);
      if (!v(a.body))
        // array indices as [] so one drift in a list counts once
        problems = [...new Set(v.errors.map((e) => `${e.instancePath.replace(/\/\d+(?=\/|$)/g, "/[]") || "(body)"} ` +
          `${e.message}${e.params?.additionalProperty ? ` (${e.params.additionalProperty})` : ""}` +
          `${e.params?.allowedValues ? ` ${JSON.stringify(e.params.allowedValues)}` : ""}`))].join("; ");
    }
    if (problems) {
      const fkey = `${key}: ${problems}`;
      const f = failures.get(fkey) || { count: 0, body: a.body };
      f.count++;
      failures.set(fkey, f);
    }
  }
  // the operations whose success is a JSON answer (not a stream, text or upgrade)
  const ops = [];
  for (const [path, item] of Object.entries(doc.paths))
    for (const m of ["get", "put", "post", "delete", "patch"])
      if (item[m] && Object.entries(item[m].responses).some(([st, r]) => /^2/.test(st) && r.content?.["application/json"]))
        ops.push([m.toUpperCase(), path, item[m]]);
  const answered = ops.filter(([m, p, op]) =>
    Object.keys(op.responses).some((st) => /^2/.test(st) && seen.has(`${m} ${p} ${st}`)));
  const unanswered = ops.filter((o) => !answered.includes(o)).map(([m, p]) => `${m} ${p}`);
  console.log(`${n} answers checked, ${seen.size} (method, route, status) kinds; ` +
    `${answered.length} of the ${ops.length} operations with JSON answers seen succeeding` +
    (unanswered.length ? ` (not seen: ${unanswered.join(", ")})` : ""));
  for (const [f, { count, body }] of failures) {
    const text = JSON.stringify(body);
    console.log(`FAIL ${f} [${count} answer${count > 1 ? "s" : ""}]\n     e.g. ${text.length > 600 ? text.slice(0, 600) + "…" : text}`);
    failed = true;
  }
  if (n === 0) {
    console.log(`${answersPath}: empty`);
    failed = true;
  }
}
process.exit(failed ? 1 : 0);
