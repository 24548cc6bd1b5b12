// Loads a package from the test runtimes' node_modules (scripts/install-test-runtimes.sh):
// $CTXPATCH_NODE_MODULES, else tests/runtimes/node_modules beside this file. ESM imports do not
// honour NODE_PATH, so scripts elsewhere in tests/ resolve through here.
import {createRequire} from "node:module";
import {join} from "node:path";
import {fileURLToPath, pathToFileURL} from "node:url";

export const nodeModules =
  process.env.CTXPATCH_NODE_MODULES || join(fileURLToPath(new URL(".", import.meta.url)), "node_modules");
const require = createRequire(join(nodeModules, "__resolve__.js"));

export async function load(name) {
  return import(pathToFileURL(require.resolve(name)).href);
}
