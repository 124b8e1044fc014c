// Starts the telegram-test-api emulator on 127.0.0.1 for the hermes-gateway
// Telegram adapter tests.
//
//   node start.js [port]     (port 0 or absent: an ephemeral port)
//
// Prints "LISTENING <port>" once the server accepts connections, so a test can
// read the real port. Exits when its stdin closes (the test process ended or
// dropped the pipe) or on SIGTERM/SIGINT, so no emulator outlives its test.
'use strict';

let TelegramServer;
try {
  TelegramServer = require('telegram-test-api');
  TelegramServer = TelegramServer.TelegramServer || TelegramServer.default || TelegramServer;
} catch (e) {
  console.error('telegram-test-api is not installed: run `npm ci` in tests/emulators/telegram');
  process.exit(2);
}

async function main() {
  const port = Number(process.argv[2] || process.env.TELEGRAM_EMULATOR_PORT || 0);
  const server = new TelegramServer({ port: 9000, host: '127.0.0.1', storeTimeout: 600 });
  // The emulator turns port 0 into its default 9000 (`port || 9000`); set the
  // real wish after construction so the OS picks a free port without races.
  server.config.port = port;
  await server.start();
  const actual = server.server.address().port;
  process.stdout.write(`LISTENING ${actual}\n`);

  const stop = async () => {
    try {
      await server.stop();
    } finally {
      process.exit(0);
    }
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  process.stdin.on('end', stop);
  process.stdin.on('close', stop);
  process.stdin.resume();
}

main().catch((e) => {
  console.error(`telegram emulator failed to start: ${e && e.stack ? e.stack : e}`);
  process.exit(1);
});
