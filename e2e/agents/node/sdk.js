// The Node SDK (@ngrok/ngrok) as an agent of edgeplane, for the Go test in ../node_test.go.
//
// Usage: node sdk.js MODE SERVER_ADDR CA_FILE TOKEN DOMAIN
//
// It starts a local HTTP app (the "Node upstream"), then, by MODE:
//   builder  SessionBuilder with serverAddr + caCert: an https endpoint on DOMAIN, an http one on
//            http-DOMAIN, and a labeled tunnel edge=edghts_node, all forwarding to the app;
//   forward  ngrok.forward() with server_addr + session_ca_cert: an https endpoint on DOMAIN;
//   refused  SessionBuilder.connect() with TOKEN, which edgeplane is expected to refuse.
// It prints one JSON line per event on stdout ({"event":"endpoint","url":…},
// {"event":"labeled","id":…}, {"event":"ready"} or {"event":"error","stage":…,"code":…,
// "message":…}) and runs until its standard input closes.
"use strict";

const fs = require("fs");
const http = require("http");
const ngrok = require("@ngrok/ngrok");

const [mode, serverAddr, caFile, token, domain] = process.argv.slice(2);
const caPEM = fs.readFileSync(caFile);

function emit(event) {
  process.stdout.write(JSON.stringify(event) + "\n");
}

// fail reports err with its ERR_NGROK code and exits. The SDK sets errorCode on errors of
// connect() and listen() only; errors of listenAndForward() carry the code at the end of their
// message ("... error_code: ERR_NGROK_319"), where the SDK itself finds it.
function fail(stage, err) {
  const message = String(err && err.message ? err.message : err);
  const found = message.match(/error_code: (ERR_NGROK_\d+)$/);
  const code = (err && err.errorCode) || (found ? found[1] : "");
  emit({ event: "error", stage, code, message });
  process.exit(2);
}

// bulk answers /bulk/N with N bytes whose i-th is i % 251, in writes of 64 KiB that wait for
// the socket to drain, for the download test in ../bulk_test.go.
function bulk(res, n) {
  res.writeHead(200, { "Content-Type": "application/octet-stream", "Content-Length": String(n) });
  const chunk = Buffer.alloc(64 << 10);
  let sent = 0;
  const more = () => {
    while (sent < n) {
      const len = Math.min(chunk.length, n - sent);
      for (let i = 0; i < len; i++) chunk[i] = (sent + i) % 251;
      sent += len;
      if (!res.write(len === chunk.length ? chunk : chunk.subarray(0, len))) {
        res.once("drain", more);
        return;
      }
    }
    res.end();
  };
  more();
}

// The app answers with what it received, so the test sees the request as the SDK delivered it.
const app = http.createServer((req, res) => {
  const m = req.url.match(/^\/bulk\/(\d+)$/);
  if (m) {
    bulk(res, Number(m[1]));
    return;
  }
  const h = req.headers;
  res.end(`node upstream host=${h.host} xff=${h["x-forwarded-for"]} xfp=${h["x-forwarded-proto"]} xfh=${h["x-forwarded-host"]} path=${req.url}`);
});

async function builder(upstream) {
  let session;
  try {
    session = await new ngrok.SessionBuilder()
      .authtoken(token)
      .serverAddr(serverAddr)
      .caCert(caPEM)
      .metadata("node-e2e")
      .connect();
  } catch (err) {
    fail("connect", err);
  }
  try {
    const secure = await session.httpEndpoint().domain(domain).listenAndForward(upstream);
    emit({ event: "endpoint", url: secure.url() });
    const plain = await session.httpEndpoint().scheme("HTTP").domain("http-" + domain).listenAndForward(upstream);
    emit({ event: "endpoint", url: plain.url() });
  } catch (err) {
    fail("listen", err);
  }
  try {
    const labeled = await session.labeledListener().label("edge", "edghts_node").listenAndForward(upstream);
    emit({ event: "labeled", id: labeled.id() });
  } catch (err) {
    fail("labeled", err);
  }
  return session;
}

async function forward(upstream) {
  try {
    const listener = await ngrok.forward({
      addr: upstream,
      authtoken: token,
      server_addr: serverAddr,
      session_ca_cert: caPEM.toString(),
      domain,
    });
    emit({ event: "endpoint", url: listener.url() });
  } catch (err) {
    fail("forward", err);
  }
}

async function refused() {
  try {
    const session = await new ngrok.SessionBuilder().authtoken(token).serverAddr(serverAddr).caCert(caPEM).connect();
    await session.close();
    emit({ event: "connected" });
  } catch (err) {
    fail("connect", err);
  }
}

async function main() {
  await new Promise((resolve) => app.listen(0, "127.0.0.1", resolve));
  const upstream = `http://127.0.0.1:${app.address().port}`;
  let session;
  switch (mode) {
    case "builder":
      session = await builder(upstream);
      break;
    case "forward":
      await forward(upstream);
      break;
    case "refused":
      await refused();
      process.exit(0);
      break;
    default:
      fail("setup", `unknown mode ${mode}`);
  }
  emit({ event: "ready" });
  process.stdin.resume();
  process.stdin.on("end", async () => {
    if (session) {
      await session.close().catch(() => {});
    }
    await ngrok.disconnect().catch(() => {});
    process.exit(0);
  });
}

main().catch((err) => fail("main", err));
