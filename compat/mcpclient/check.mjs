// check.mjs drives `synapse mcp` (stdio) and a hub's /mcp with the official
// MCP TypeScript SDK client (@modelcontextprotocol/sdk, the version in
// package.json) and checks what real clients rely on (issue 21 item 8):
// the tools, a refusal, wait with progress, channel events for a message
// and a freed task, and DELETE ending the agent.
//
//   node check.mjs SYNAPSE_BINARY ws://127.0.0.1:PORT http://127.0.0.1:PORT/mcp
//
// Prints one line per check and exits 1 if any failed. See README.md.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { randomBytes } from "node:crypto";

const [bin, ws, http] = process.argv.slice(2);
if (!bin || !ws || !http) {
  console.error("usage: node check.mjs SYNAPSE_BINARY HUB_WS_URI HUB_MCP_URL");
  process.exit(2);
}
const project = "tsmcp-" + randomBytes(3).toString("hex");
let failed = 0;
const check = (name, ok, detail = "") => {
  console.log(`${ok ? "ok  " : "FAIL"} ${name}${ok ? "" : ": " + detail}`);
  if (!ok) failed++;
};
const text = (r) => (r.content ?? []).map((c) => c.text ?? "").join("");

// connect returns a client whose channel events queue up for next().
async function connect(transport) {
  const client = new Client({ name: "synapse-compat", version: "1" });
  const events = [];
  const waiters = [];
  client.fallbackNotificationHandler = async (n) => {
    if (n.method !== "notifications/claude/channel") return;
    events.push(n.params);
    waiters.splice(0).forEach((w) => w());
  };
  await client.connect(transport);
  client.nextEvent = async (kind, ms = 30000) => {
    const deadline = Date.now() + ms;
    for (;;) {
      const i = events.findIndex((e) => e.meta?.kind === kind);
      if (i >= 0) return events.splice(i, 1)[0];
      if (Date.now() > deadline) throw new Error(`no channel event of kind ${kind}`);
      await new Promise((r) => { waiters.push(r); setTimeout(r, 500); });
    }
  };
  return client;
}

const stdio = (name) => new StdioClientTransport({ command: bin,
  args: ["mcp", "--name", name, "--uri", ws, "--progress-every", "200ms"], stderr: "inherit" });

async function run(label, me, peer) {
  const tools = await me.listTools();
  const names = tools.tools.map((t) => t.name);
  const bytes = JSON.stringify(tools).length;
  check(`${label}: tools/list has claim, claim_update, task_update, wait (${bytes} bytes)`,
    ["claim", "claim_update", "task_update", "wait"].every((n) => names.includes(n)), names.join(","));
  check(`${label}: tools/list is at most 8 KB`, bytes <= 8192, `${bytes} bytes`);
  const arrays = JSON.stringify(tools.tools.find((t) => t.name === "claim").inputSchema.properties.paths);
  check(`${label}: list arguments are plain arrays`, arrays.includes('"type":"array"') && !arrays.includes("null"), arrays);

  const t1 = `${project}/${label}-T1`;
  const held = await peer.callTool({ name: "claim", arguments: { task_id: t1, paths: [`${label}/src`] } });
  check(`${label}: the peer claims`, !held.isError, text(held));
  const refused = await me.callTool({ name: "claim", arguments: { task_id: t1, paths: [`${label}/src`] } });
  check(`${label}: a held task is refused as a tool error naming the holder`, refused.isError && text(refused).includes(peer.agent), text(refused));

  let progressed = 0;
  let release;
  const gotProgress = new Promise((r) => { release = r; });
  const waiting = me.callTool({ name: "wait", arguments: { task_id: t1, timeout_seconds: 600 } }, undefined,
    { onprogress: () => { progressed++; release(); }, resetTimeoutOnProgress: true, timeout: 30000 });
  await gotProgress;
  await peer.callTool({ name: "release", arguments: { task_id: t1 } });
  const woke = await waiting;
  check(`${label}: wait reports progress and wakes on the release`, progressed > 0 && !woke.isError && woke.structuredContent?.free === true, text(woke));

  const sent = await peer.callTool({ name: "send", arguments: { to: me.agent, text: "review please", priority: true } });
  check(`${label}: the peer's message is delivered`, !sent.isError, text(sent));
  const msg = await me.nextEvent("message");
  check(`${label}: a channel event for the message (sender, msg id, urgent)`,
    msg.meta.from === peer.agent && msg.meta.msg_id && msg.meta.urgency === "urgent" && msg.content.includes("review please"), JSON.stringify(msg));

  const t2 = `${project}/${label}-T2`;
  await peer.callTool({ name: "claim", arguments: { task_id: t2, paths: [`${label}/docs`] } });
  const timedOut = await me.callTool({ name: "wait", arguments: { task_id: t2, timeout_seconds: 0.2 } });
  check(`${label}: a short wait times out`, timedOut.structuredContent?.free === false, text(timedOut));
  await peer.callTool({ name: "release", arguments: { task_id: t2 } });
  const free = await me.nextEvent("task_free");
  check(`${label}: a channel event for the freed task`, free.meta.task_id === t2, JSON.stringify(free));
}

try {
  const me = await connect(stdio(`${project}/me`));
  me.agent = `${project}/me`;
  const peer = await connect(stdio(`${project}/peer`));
  peer.agent = `${project}/peer`;
  check("stdio: handshake declares claude/channel", me.getServerCapabilities()?.experimental?.["claude/channel"] !== undefined,
    JSON.stringify(me.getServerCapabilities()));
  await run("stdio", me, peer);

  const hme = `${project}/hme`;
  const httpT = new StreamableHTTPClientTransport(new URL(`${http}?name=${hme}`));
  const hm = await connect(httpT);
  hm.agent = hme;
  await run("http", hm, peer);
  const online = async () => JSON.stringify((await peer.callTool({ name: "who", arguments: {} })).structuredContent ?? {}).includes(hme);
  check("http: the agent is online", await online());
  await httpT.terminateSession(); // DELETE
  let gone = false;
  for (let i = 0; i < 300 && !gone; i++) {
    gone = !(await online());
    if (!gone) await new Promise((r) => setTimeout(r, 100));
  }
  check("http: DELETE takes the agent offline at once", gone);
  await hm.close();
  await me.close();
  await peer.close();
} catch (e) {
  check("no exception", false, e?.stack ?? String(e));
}
process.exit(failed ? 1 : 0);
