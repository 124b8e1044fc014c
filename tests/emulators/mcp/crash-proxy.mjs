// A stdio MCP server that dies in the middle of a call: it runs
// server-everything (stdio) behind itself, relaying both directions line by
// line, and exits with status 3 right after it has passed on a `tools/call`
// of the tool named on its command line — so the client sees its server
// vanish while that call is running, deterministically.
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const crashOn = process.argv[2];
const everything = fileURLToPath(
  new URL("node_modules/@modelcontextprotocol/server-everything/dist/index.js", import.meta.url),
);
const server = spawn(process.execPath, [everything, "stdio"], {
  stdio: ["pipe", "pipe", "inherit"],
});
server.stdout.pipe(process.stdout);
createInterface({ input: process.stdin }).on("line", (line) => {
  server.stdin.write(line + "\n");
  let message;
  try {
    message = JSON.parse(line);
  } catch {
    return;
  }
  if (message.method === "tools/call" && message.params?.name === crashOn) {
    server.kill("SIGKILL");
    process.exit(3);
  }
});
process.stdin.on("end", () => server.kill());
