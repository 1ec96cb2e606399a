"""A client in another language: Node.js, with nothing but its own ``net`` module (RESP
by hand, no Redis library), runs PROTOCOL.md's consume cycle on the assembled scripts
that ``python -m redisq_django.core.scripts export`` writes: register, read, fail
(retry), promote, read the retry, acknowledge in the settle layout. Our Python side
publishes before and reads the outcome after."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from redisq_django.core import Broker

NODE_CLIENT = r"""
const net = require("net");
const fs = require("fs");
const [port, dir, queue] = process.argv.slice(1);
const q = (rest) => `redisq:{${queue}}:${rest}`;
const g = (rest) => q(`g:billing:${rest}`);

// RESP: commands as arrays of bulk strings; replies parsed as they arrive.
const socket = net.connect(Number(port), "127.0.0.1");
let buffer = Buffer.alloc(0);
const waiting = [];
socket.on("data", (chunk) => {
  buffer = Buffer.concat([buffer, chunk]);
  for (;;) {
    const parsed = parse(buffer, 0);
    if (!parsed) return;
    buffer = buffer.subarray(parsed[1]);
    waiting.shift()(parsed[0]);
  }
});
function parse(buf, at) {
  const end = buf.indexOf("\r\n", at);
  if (end < 0) return null;
  const kind = String.fromCharCode(buf[at]);
  const line = buf.toString("utf8", at + 1, end);
  if (kind === "+") return [line, end + 2];
  if (kind === "-") return [new Error(line), end + 2];
  if (kind === ":") return [Number(line), end + 2];
  if (kind === "$") {
    const n = Number(line);
    if (n < 0) return [null, end + 2];
    if (buf.length < end + 2 + n + 2) return null;
    return [buf.toString("utf8", end + 2, end + 2 + n), end + 2 + n + 2];
  }
  const n = Number(line);  // "*": an array
  if (n < 0) return [null, end + 2];
  const out = [];
  let next = end + 2;
  for (let i = 0; i < n; i++) {
    const item = parse(buf, next);
    if (!item) return null;
    out.push(item[0]);
    next = item[1];
  }
  return [out, next];
}
function call(...args) {
  const parts = [`*${args.length}\r\n`];
  for (const a of args.map(String)) parts.push(`$${Buffer.byteLength(a)}\r\n${a}\r\n`);
  socket.write(parts.join(""));
  return new Promise((resolve, reject) =>
    waiting.push((r) => (r instanceof Error ? reject(r) : resolve(r))));
}

const SETTLE_KEYS = [q("log"), g("direct"), g("retry"), g("dead"), g("holders"),
  g("held_back"), q("events")];
// The settle layout: group, instance, "" (not ordered), the entries, no event, own args.
const settle = (entries, ...own) =>
  ["billing", "node-1", "", entries.length, ...entries.flat(), 0, ...own];

(async () => {
  const sha = {};
  for (const name of ["ensure_consumer", "fail", "ack", "promote"]) {
    sha[name] = await call("SCRIPT", "LOAD", fs.readFileSync(`${dir}/${name}.lua`, "utf8"));
  }
  const script = (name, keys, args) =>
    call("EVALSHA", sha[name], keys.length, ...keys, "redisq/2", ...args);
  const out = {};
  out.created = await script("ensure_consumer", [q("meta"), q("log"), g("direct")],
    [1, "billing", "0-0"]);
  const read = () => call("XREADGROUP", "GROUP", "billing", "node-1", "COUNT", 10,
    "STREAMS", q("log"), g("direct"), ">", ">");
  const [[, entries]] = await read();
  const fields = (e) => Object.fromEntries(
    e[1].flatMap((v, i, all) => (i % 2 ? [] : [[v, all[i + 1]]])));
  const [a, b] = entries;
  const fa = fields(a);
  // A message's id is its `id` field, else its entry id; so is when it was published.
  const id = (e) => fields(e).id ?? e[0];
  // The first fails: a retry due at once, its envelope as PROTOCOL.md's Fail builds it
  out.failed = await script("fail", SETTLE_KEYS, settle([["log", a[0], id(a), ""]],
    "retry", 0, "payload", fa.payload, "id", id(a),
    "published_at", fa.published_at ?? a[0].split("-")[0], "attempts", 1,
    "first_failed_at", Date.now()));
  out.acked_log = await script("ack", SETTLE_KEYS, settle([["log", b[0], id(b), ""]]));
  out.promoted = await script("promote", [q("delayed"), q("log"), g("retry"), g("direct")],
    ["", 100]);
  const again = await read();
  const direct = again.find(([stream]) => stream === g("direct"))[1][0];
  out.retried = fields(direct);
  out.acked_direct = await script("ack", SETTLE_KEYS,
    settle([["direct", direct[0], out.retried.id, ""]]));
  console.log(JSON.stringify(out));
  socket.end();
})().catch((err) => { console.error(String(err)); process.exit(1); });
"""


def test_a_node_client_consumes_with_the_exported_scripts(
    redis_client: redis.Redis, queue_name: str, tmp_path: Path
) -> None:
    node = shutil.which("node") or "/usr/bin/node"
    if not shutil.which(node):
        pytest.skip("node is not installed: the cross-language check needs it")
    # Given the scripts as another language's client gets them (the export command)
    scripts = tmp_path / "scripts"
    subprocess.run(
        [sys.executable, "-m", "redisq_django.core.scripts", "export", str(scripts)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    # And two messages our Python side published
    broker = Broker(redis_client)
    ids = broker.publish_many(queue_name, [{"n": 1}, {"n": 2}])
    # When the Node client consumes: the first fails once (a retry), the second succeeds
    port = redis_client.connection_pool.connection_kwargs["port"]
    done = subprocess.run(
        [node, "-e", NODE_CLIENT, str(port), str(scripts), queue_name],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    # Then each call did what PROTOCOL.md says: a group created, the failure settled, both
    # acknowledgements counted, the retry promoted and read back as the second delivery
    assert (out["created"], out["failed"], out["acked_log"]) == (1, 1, 1)
    assert out["promoted"][1] == 1 and out["acked_direct"] == 1
    assert (out["retried"]["id"], out["retried"]["attempts"]) == (ids[0], "1")
    # And nothing is left pending, waiting or retrying, as our Python side reads it
    stats = broker.stats(queue_name)
    [billing] = stats.consumers
    assert (billing.backlog, billing.in_flight, billing.waiting_retry) == (0, 0, 0)
    assert redis_client.xlen(broker.keys(queue_name).group("billing").direct) == 0
