// Drives WeCom's official callback crypto (@wecom/crypto) for the
// hermes-gateway tests: one JSON request per stdin line, one JSON answer per
// stdout line, in order.
//   {"op":"encrypt","key":K,"message":M,"id":CORP}      -> {"encrypted":B64}
//   {"op":"decrypt","key":K,"encrypted":B64}            -> {"message":M,"message_b64":..,"id":CORP}
//   {"op":"sign","token":T,"timestamp":S,"nonce":N,"encrypted":B64} -> {"signature":HEX}
// A request the library rejects answers {"error":"..."}.
'use strict';
const readline = require('readline');
const { encrypt, decrypt, getSignature } = require('@wecom/crypto');

function handle(req) {
  switch (req.op) {
    case 'encrypt':
      return { encrypted: encrypt(req.key, req.message, req.id) };
    case 'decrypt': {
      const out = decrypt(req.key, req.encrypted);
      return { message: out.message, message_b64: Buffer.from(out.message).toString('base64'), id: out.id };
    }
    case 'sign':
      return { signature: getSignature(req.token, req.timestamp, req.nonce, req.encrypted) };
    default:
      return { error: `unknown op ${req.op}` };
  }
}

const rl = readline.createInterface({ input: process.stdin });
rl.on('line', (line) => {
  let answer;
  try {
    answer = handle(JSON.parse(line));
  } catch (e) {
    answer = { error: String(e && e.message || e) };
  }
  process.stdout.write(`${JSON.stringify(answer)}\n`);
});
