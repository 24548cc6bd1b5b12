// Runs the bucket graphs test_onnx_t5_bucket.c writes (DIR/b{bidirectional}_{num_buckets}_{max_distance}.onnx,
// rel int64 [n] -> bucket int64 [n]) in onnxruntime-node on every row of the PyTorch golden
// tests/goldens/t5_buckets.json ([r, bidirectional, num_buckets, max_distance, bucket]);
// exit 0 when every bucket agrees, 1 otherwise (the first differences are printed).
//   node t5_bucket_check.mjs DIR GOLDEN.json
import {readFileSync} from "node:fs";
import {join} from "node:path";
import {load} from "../runtimes/load.mjs";

const ort = await load("onnxruntime-node");
const [dir, goldenPath] = process.argv.slice(2);
const groups = new Map();
for (const row of JSON.parse(readFileSync(goldenPath, "utf8")).t5_buckets) {
  const key = `b${row[1]}_${row[2]}_${row[3]}`;
  if (!groups.has(key)) groups.set(key, []);
  groups.get(key).push(row);
}
let rows = 0, wrong = 0;
for (const [key, list] of groups) {
  const s = await ort.InferenceSession.create(join(dir, `${key}.onnx`));
  const rel = new ort.Tensor("int64", BigInt64Array.from(list, (r) => BigInt(r[0])), [list.length]);
  const got = (await s.run({rel})).bucket.data;
  list.forEach((r, i) => {
    rows++;
    if (Number(got[i]) !== r[4] && wrong++ < 10) console.log(`${key}: r=${r[0]}: graph ${got[i]}, PyTorch ${r[4]}`);
  });
  await s.release();
}
console.log(`t5 buckets in onnxruntime: ${rows} golden rows in ${groups.size} graphs, ${wrong} differ`);
process.exit(rows > 2000 && wrong === 0 ? 0 : 1);
