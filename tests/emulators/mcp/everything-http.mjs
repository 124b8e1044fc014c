// server-everything's streamable-HTTP transport, bound to loopback on a port
// the kernel picks. The upstream script listens on every interface at
// $PORT (default 3001); the tests want 127.0.0.1 and no port races, so
// `listen` is pinned to 127.0.0.1 and the chosen port is printed as
// `LISTENING <port>` on stdout once the socket is bound.
import http from "node:http";

const listen = http.Server.prototype.listen;
http.Server.prototype.listen = function (port, ...rest) {
  const callback = rest.find((arg) => typeof arg === "function");
  this.once("listening", () => {
    console.log(`LISTENING ${this.address().port}`);
  });
  return listen.call(this, port, "127.0.0.1", callback);
};

process.env.PORT = process.env.PORT || "0";
await import("@modelcontextprotocol/server-everything/dist/transports/streamableHttp.js");
