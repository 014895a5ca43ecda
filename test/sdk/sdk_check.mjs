// Drives infergate VIPs with the official OpenAI and Anthropic Node SDKs
// (npm: openai, @anthropic-ai/sdk), as a user would: run.sh starts the
// gateway and recording fake engines on loopback and passes the VIP URLs.
// Each check prints one line; any failure exits 1.
import OpenAI, { toFile } from "openai";
import Anthropic from "@anthropic-ai/sdk";

const single = process.env.SINGLE_URL; // single-pool VIP (internal/fakeengine)
const vllm = process.env.VLLM_PD_URL; // vLLM 1P1D VIP (infergate fake-engine)
const sglang = process.env.SGLANG_PD_URL; // SGLang 1P1D VIP
let failed = 0;
async function check(name, fn) {
  try {
    const got = await fn();
    console.log(`ok   ${name}: ${got}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e?.status ?? ""} ${e?.message ?? e}`);
  }
}
function must(cond, what) {
  if (!cond) throw new Error(what);
}
const oai = (base) => new OpenAI({ baseURL: base + "/v1", apiKey: "none", maxRetries: 0 });
const ant = (base) => new Anthropic({ baseURL: base, apiKey: "none", maxRetries: 0 });

for (const [label, base] of [["single", single], ["vllm-pd", vllm], ["sglang-pd", sglang]]) {
  const c = oai(base);
  await check(`${label} completions`, async () => {
    const r = await c.completions.create({ model: "fake-model", prompt: "hello", max_tokens: 4 });
    must(r.choices.length === 1, "one choice");
    return JSON.stringify(r.choices[0].text);
  });
  await check(`${label} chat stream`, async () => {
    const s = await c.chat.completions.create({ model: "fake-model", messages: [{ role: "user", content: "hi" }], stream: true });
    let text = "";
    for await (const ch of s) text += ch.choices[0]?.delta?.content ?? "";
    must(text.length > 0, "streamed text");
    return JSON.stringify(text);
  });
  await check(`${label} chat n=3`, async () => {
    const r = await c.chat.completions.create({ model: "fake-model", messages: [{ role: "user", content: "hi" }], n: 3 });
    must(r.choices.map((x) => x.index).join() === "0,1,2", "indexes 0,1,2");
    return `${r.choices.length} choices`;
  });
  await check(`${label} chat n=3 stream`, async () => {
    const s = await c.chat.completions.create({ model: "fake-model", messages: [{ role: "user", content: "hi" }], n: 3, stream: true });
    const per = {};
    for await (const ch of s) for (const x of ch.choices) per[x.index] = (per[x.index] ?? "") + (x.delta?.content ?? "");
    must(Object.keys(per).join() === "0,1,2", "indexes 0,1,2 got " + Object.keys(per));
    must(per[0] === per[1] && per[1] === per[2], "same text per choice");
    return JSON.stringify(per);
  });
  await check(`${label} responses`, async () => {
    const r = await c.responses.create({ model: "fake-model", input: "hi", max_output_tokens: 16 });
    must(r.output_text.length > 0, "output_text");
    return JSON.stringify(r.output_text);
  });
  await check(`${label} responses stream`, async () => {
    const s = await c.responses.create({ model: "fake-model", input: "hi", max_output_tokens: 16, stream: true });
    const types = [];
    for await (const ev of s) types.push(ev.type);
    must(types.at(-1) === "response.completed", "ends with response.completed: " + types.at(-1));
    return `${types.length} events, last ${types.at(-1)}`;
  });
  await check(`${label} embeddings`, async () => {
    const r = await c.embeddings.create({ model: "fake-model", input: "hi" });
    must(r.data[0].embedding.length > 0, "an embedding");
    return `dim ${r.data[0].embedding.length}`;
  });
  await check(`${label} models.list`, async () => {
    const r = await c.models.list();
    return r.data.map((m) => m.id).join();
  });
  const a = ant(base);
  await check(`${label} anthropic messages`, async () => {
    try {
      const r = await a.messages.create({ model: "fake-model", max_tokens: 16, messages: [{ role: "user", content: "hi" }] });
      must(label !== "sglang-pd", "SGLang P/D without a role-0 endpoint must refuse /v1/messages");
      return JSON.stringify(r.content[0].text);
    } catch (e) {
      // Documented: an SGLang decode cannot serve without a prefill room.
      if (label === "sglang-pd" && e?.status === 501 && String(e?.message).includes("pd_path_unsupported")) return "501 pd_path_unsupported (as documented)";
      throw e;
    }
  });
  if (label !== "sglang-pd") {
    // messages.stream() accumulates the whole event sequence and throws on a
    // message_start without usage or a missing content block event.
    await check(`${label} anthropic messages.stream`, async () => {
      const s = a.messages.stream({ model: "fake-model", max_tokens: 2, messages: [{ role: "user", content: "hi" }] });
      let text = "";
      s.on("text", (t) => (text += t));
      const m = await s.finalMessage();
      must(m.content[0]?.text === text && text.length > 0, "final message carries the streamed text");
      must(m.stop_reason === "max_tokens" || label === "single", "stopped at max_tokens: " + m.stop_reason);
      return `${JSON.stringify(text)} stop_reason ${m.stop_reason}`;
    });
  }
  await check(`${label} anthropic count_tokens`, async () => {
    const r = await a.messages.countTokens({ model: "fake-model", messages: [{ role: "user", content: "hi" }] });
    return `${r.input_tokens} tokens`;
  });
}

const c = oai(single);
await check("single audio transcription upload (32 MiB)", async () => {
  const r = await c.audio.transcriptions.create({ model: "whisper-1", file: await toFile(Buffer.alloc(32 << 20), "speech.wav") });
  must(r.text.includes(String(32 << 20)), "engine counted every byte: " + r.text);
  return JSON.stringify(r.text);
});
await check("single anthropic stream", async () => {
  const s = await ant(single).messages.create({ model: "fake-model", max_tokens: 16, messages: [{ role: "user", content: "hi" }], stream: true });
  const types = [];
  for await (const ev of s) types.push(ev.type);
  must(types.at(-1) === "message_stop", "ends with message_stop");
  return types.join(",");
});
process.exit(failed ? 1 : 0);
