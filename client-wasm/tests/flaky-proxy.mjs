// A proxy for the browser tests that can take the server "down" and bring it back: it forwards
// everything to the turnstream server given as argument, and on `POST /__proxy/down` cuts every
// open connection (streams included) and resets new ones until `POST /__proxy/up`. Prints
// `listening on http://ADDR` first, like the server. Loopback only.
//
// `GET /__proxy/log` answers the requests it forwarded (`["GET /api/turns/t1", ...]`, the newest
// 10000), so a test can check which calls the SDK made.
import http from "node:http";

const target = new URL(process.argv[2] ?? "");
let down = false;
const sockets = new Set();
const log = [];

const cors = {
  "access-control-allow-origin": "*",
  "access-control-allow-methods": "GET, POST, OPTIONS",
};

const server = http.createServer((req, res) => {
  if (req.url === "/__proxy/down" || req.url === "/__proxy/up") {
    if (req.method === "POST") {
      down = req.url === "/__proxy/down";
      if (down) {
        for (const s of sockets) if (s !== req.socket) s.destroy();
      }
    }
    res.writeHead(204, cors).end();
    return;
  }
  if (req.url === "/__proxy/log") {
    res.writeHead(200, { ...cors, "content-type": "application/json" }).end(JSON.stringify(log));
    return;
  }
  if (down) {
    req.socket.destroy();
    return;
  }
  log.push(`${req.method} ${req.url}`);
  if (log.length > 10000) log.splice(0, log.length - 10000);
  const upstream = http.request(
    {
      host: target.hostname,
      port: target.port,
      method: req.method,
      path: req.url,
      headers: { ...req.headers, host: target.host },
    },
    (up) => {
      res.writeHead(up.statusCode ?? 502, up.headers);
      up.pipe(res);
    },
  );
  upstream.on("error", () => req.socket.destroy());
  // The browser went away (or we cut it): drop the upstream request too. (Not `req`'s "close":
  // that fires as soon as the request body has been read.)
  res.on("close", () => {
    if (!res.writableFinished) upstream.destroy();
  });
  req.pipe(upstream);
});

server.on("connection", (s) => {
  sockets.add(s);
  s.on("close", () => sockets.delete(s));
});

server.listen(0, "127.0.0.1", () => {
  const { port } = server.address();
  console.log(`listening on http://127.0.0.1:${port}`);
});
