// Compile gyre-contract's JSON Schemas with ajv in its default strict mode and validate a corpus.
//
// usage: node check_schemas.mjs SCHEMAS_DIR [CORPUS.json]
// The x-gyre keywords are registered from the vocabulary meta-schema in SCHEMAS_DIR (the
// documented way, docs/contract.md §5): its `properties` name them. Every schema is compiled in
// strict mode and checked against the meta-schema. CORPUS.json is
// {"schemas": [extra schema documents], "cases": [{"schema": $id, "record": ...}, ...]};
// the verdicts are printed as JSON on stdout, in the cases' order (tests/schema/test_ajv.py).
import fs from "node:fs";
import path from "node:path";
import Ajv2020 from "ajv/dist/2020.js";

const META_ID = "urn:gyre-contract:meta:1";
const [dir, corpusPath] = process.argv.slice(2);
const files = fs.readdirSync(dir).filter((f) => f.endsWith(".json")).sort();
const docs = new Map(files.map((f) => [f, JSON.parse(fs.readFileSync(path.join(dir, f), "utf8"))]));
const metaFile = files.find((f) => docs.get(f).$id === META_ID);
if (!metaFile) {
  console.error(`error: no meta-schema with $id ${META_ID} in ${dir}`);
  process.exit(2);
}
const meta = docs.get(metaFile);
const keywords = Object.keys(meta.properties).filter((k) => k.startsWith("x-gyre-"));

const warnings = [];
const logger = { log() {}, warn: (...a) => warnings.push(a.join(" ")), error: (...a) => warnings.push(a.join(" ")) };
const ajv = new Ajv2020({ strict: process.env.AJV_STRICT === "all" ? true : undefined, allErrors: true, logger });
ajv.addVocabulary(keywords);
ajv.addMetaSchema(meta);

const corpus = corpusPath ? JSON.parse(fs.readFileSync(corpusPath, "utf8")) : { schemas: [], cases: [] };
const out = { ajv_version: JSON.parse(fs.readFileSync(new URL("./node_modules/ajv/package.json", import.meta.url))).version,
  keywords, schemas: {}, verdicts: [], warnings };
const toCompile = [...files.filter((f) => f !== metaFile).map((f) => [f, docs.get(f)]),
  ...corpus.schemas.map((doc) => [doc.$id, doc])];
for (const [name, doc] of toCompile) {
  const entry = { id: doc.$id, compiled: false, meets_meta_schema: false, errors: [] };
  try {
    ajv.addSchema(doc);
    ajv.getSchema(doc.$id);
    entry.compiled = true;
  } catch (e) {
    entry.errors.push(String(e.message));
  }
  entry.meets_meta_schema = ajv.validate(META_ID, doc);
  if (!entry.meets_meta_schema) entry.errors.push(ajv.errorsText(ajv.errors));
  out.schemas[name] = entry;
}
for (const { schema, record } of corpus.cases) {
  const validate = ajv.getSchema(schema);
  const valid = validate(record);
  out.verdicts.push({ schema, valid, errors: valid ? [] : validate.errors.map((e) => `${e.instancePath} ${e.message}`) });
}
process.stdout.write(JSON.stringify(out, null, 1) + "\n");
