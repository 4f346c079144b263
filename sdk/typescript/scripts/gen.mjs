// src/schema.ts from the server's OpenAPI document: `npm run gen -- openapi.json [out.ts]`.
// Get the document from a running server (`curl http://127.0.0.1:8000/openapi.json`);
// tests/sdk/test_typescript_client.py regenerates it from a live `tiermem serve` and fails
// when the checked-in file differs.
import { readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import openapiTS, { astToString, COMMENT_HEADER } from "openapi-typescript";

const [input, output] = process.argv.slice(2);
if (!input) {
  console.error("usage: npm run gen -- <openapi.json> [<out.ts>]  (default out: src/schema.ts)");
  process.exit(2);
}
// npm runs scripts in the package folder; paths are read from where `npm run` was typed.
const from = process.env.INIT_CWD ?? process.cwd();
const here = path.dirname(fileURLToPath(import.meta.url));
const source = JSON.parse(readFileSync(path.resolve(from, input), "utf8"));
const target = output ? path.resolve(from, output) : path.join(here, "..", "src", "schema.ts");
const ast = await openapiTS(source);
writeFileSync(target, COMMENT_HEADER + astToString(ast));
console.log(`wrote ${path.relative(from, target) || target}`);
