// node-llama-cpp's linux-x64 prebuilt loads with no network and no build (run by test_runtimes_smoke).
import {load} from "./load.mjs";
const {getLlama} = await load("node-llama-cpp");
const llama = await getLlama({gpu: false, build: "never", usePrebuiltBinaries: true, progressLogs: false});
console.log(`node-llama-cpp: llama.cpp ${llama.llamaCppRelease.release}, build ${llama.buildType}, gpu ${llama.gpu}`);
await llama.dispose();
