// check.mjs runs the reference's own TypeScript client (SYNAPSE CHANNEL's
// clients/js, built outside this repository) against a hub and checks what
// that client relies on. It reads frames only as the client exposes them:
// the decoded object of each frame, and of presence_update only event,
// agent and online_agents.
//
//   node --experimental-websocket compat/refclient/check.mjs ws://127.0.0.1:PORT
//
// REFJS is the folder of the built client (dist/index.js), by default
// $REF_ROOT/refjs. SYNAPSE_TOKEN, if set, is sent by every agent. Prints
// one line per check and exits 1 if any failed. See README.md beside it.

import path from "node:path";
import { pathToFileURL } from "node:url";
import { randomBytes } from "node:crypto";

const uri = process.argv[2] ?? process.env.SYNAPSE_URI ?? "ws://127.0.0.1:8876";
const refjs = process.env.REFJS ?? (process.env.REF_ROOT ? path.join(process.env.REF_ROOT, "refjs") : "");
if (!refjs) {
  console.error("set REFJS to the built reference client's folder (or REF_ROOT, for $REF_ROOT/refjs): see compat/refclient/README.md");
  process.exit(2);
}
if (typeof WebSocket === "undefined") {
  console.error("this Node has no global WebSocket: run node --experimental-websocket (Node 20) or Node 22+");
  process.exit(2);
}
const { SynapseClient, MessageType } = await import(pathToFileURL(path.join(refjs, "dist", "index.js")).href);

const token = process.env.SYNAPSE_TOKEN || undefined;
const project = "refjs-" + randomBytes(3).toString("hex");
const names = { A: `${project}/alpha`, B: `${project}/bravo`, C: `${project}/charlie` };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// An agent: the reference client and every frame it decoded, in order.
function agent(key) {
  const client = new SynapseClient({ uri, name: names[key], ...(token ? { token } : {}), heartbeatIntervalMs: 60000 });
  const seen = [];
  const waiters = [];
  client.onMessage((m) => {
    seen.push(m);
    for (const w of [...waiters]) {
      if (w.match(m)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(m);
      }
    }
  });
  // next resolves with the first frame, seen already or to come, that
  // match accepts, or null after ms.
  const next = (match, ms = 2000) => {
    const had = seen.find(match);
    if (had) return Promise.resolve(had);
    return new Promise((resolve) => {
      const w = { match, resolve };
      waiters.push(w);
      setTimeout(() => {
        const i = waiters.indexOf(w);
        if (i >= 0) {
          waiters.splice(i, 1);
          resolve(null);
        }
      }, ms);
    });
  };
  return { key, name: names[key], client, seen, next };
}

const results = [];
function check(name, ok, detail = "") {
  results.push({ name, ok });
  console.log(`${ok ? "PASS" : "FAIL"}  ${name}${detail ? ` (${detail})` : ""}`);
}

// Presence as the client reads it: only event, agent and online_agents.
const presence = (m) => m.type === MessageType.PresenceUpdate;
const joined = (who) => (m) => presence(m) && m.event === "joined" && m.agent === who;
const left = (who) => (m) => presence(m) && m.event === "left" && m.agent === who;
const presenceSeen = (a) => a.seen.filter(presence).map((m) => `${m.event}:${m.agent}`).join(", ");

const A = agent("A"), B = agent("B"), C = agent("C");
const all = [A, B, C];

try {
  // 1. Three agents connect a few milliseconds apart. connect() resolves
  // on the hub's welcome, which an open hub sends before it has read the
  // registration.
  for (const a of all) {
    try {
      await a.client.connect();
      check(`${a.key} connects and is welcomed`, true);
    } catch (e) {
      check(`${a.key} connects and is welcomed`, false, String(e));
      throw new Error("cannot go on without all three agents");
    }
    await sleep(10);
  }
  for (const a of all) {
    const own = await a.next(joined(a.name));
    check(`${a.key} sees its own presence_update joined`, own !== null, presenceSeen(a));
  }
  for (const [i, a] of all.entries()) {
    for (const later of all.slice(i + 1)) {
      const m = await a.next(joined(later.name));
      check(`${a.key} sees presence_update event:"joined" agent:${later.key}`, m !== null, `saw ${presenceSeen(a) || "none"}`);
    }
  }
  const last = await A.next((m) => presence(m) && Array.isArray(m.online_agents) && all.every((x) => m.online_agents.includes(x.name)));
  check("A's presence_update online_agents lists all three", last !== null);

  // 2. Chat: directed, and to all.
  A.client.chat("hello bravo", { target: B.name });
  const direct = await B.next((m) => m.type === MessageType.Chat && m.sender === A.name && m.payload === "hello bravo");
  check("directed chat A → B arrives", direct !== null);
  B.client.chat("hello everyone", { target: "all" });
  const toAllA = await A.next((m) => m.type === MessageType.Chat && m.sender === B.name && m.payload === "hello everyone");
  const toAllC = await C.next((m) => m.type === MessageType.Chat && m.sender === B.name && m.payload === "hello everyone");
  check("chat to all from B reaches A and C", toAllA !== null && toAllC !== null);

  // 3. Claims: granted, a conflicting one refused, released.
  const task = `${project}:T1`, other = `${project}:T2`, file = `${project}/src/a.go`;
  A.client.claim(task, [file]);
  const granted = await A.next((m) => m.type === MessageType.ClaimGranted && m.task_id === task && m.owner === A.name);
  check("claim → claim_granted (task_id, owner)", granted !== null, granted ? `epoch ${granted.epoch}` : "");
  B.client.claim(other, [file]);
  const denied = await B.next((m) => (m.type === MessageType.ClaimDenied && m.task_id === other) || (m.type === MessageType.ClaimGranted && m.task_id === other));
  check("a conflicting claim → claim_denied", denied !== null && denied.type === MessageType.ClaimDenied, denied ? `${denied.type} ${denied.reason_code ?? ""}` : "no answer");
  A.client.release(task);
  const released = await A.next((m) => m.type === MessageType.ReleaseGranted && m.task_id === task);
  check("release → release_granted", released !== null);

  // 4. Queries.
  A.client.requestBoard();
  const board = await A.next((m) => m.type === MessageType.BoardSnapshot);
  check("board request → board_snapshot", board !== null);
  A.client.requestWho();
  const who = await A.next((m) => m.type === MessageType.WhoSnapshot);
  check("who request → who_snapshot with all three", who !== null && all.every((x) => (who.online_agents ?? []).includes(x.name)));
  A.client.requestState();
  const state = await A.next((m) => m.type === MessageType.StateSnapshot);
  check("state request → state_snapshot", state !== null);

  // 5. A keepalive heartbeat gets no reply (the client sends "online"), and
  // the socket still answers afterwards.
  const before = A.seen.length;
  A.client.send(MessageType.Heartbeat, { target: "System", payload: "online" });
  await sleep(300);
  const replies = A.seen.slice(before).filter((m) => m.target === A.name || m.target === "self");
  A.client.requestWho();
  const after = await A.next((m) => m.type === MessageType.WhoSnapshot && A.seen.indexOf(m) >= before);
  check("heartbeat → no reply, the socket stays", replies.length === 0 && after !== null, replies.map((m) => m.type).join(", "));

  // 6. Leaves: C goes, A and B see it.
  C.client.close();
  const leftA = await A.next(left(C.name)), leftB = await B.next(left(C.name));
  check(`A and B see presence_update event:"left" agent:C`, leftA !== null && leftB !== null, `A saw ${presenceSeen(A)}`);
} catch (e) {
  check("the run", false, String(e?.message ?? e));
} finally {
  for (const a of all) a.client.close();
}

const failed = results.filter((r) => !r.ok).length;
console.log(`${results.length - failed}/${results.length} checks passed against ${uri}`);
process.exit(failed ? 1 : 0);
