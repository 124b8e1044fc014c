// Drives WeCom's official callback crypto (@wecom/crypto) for the
// hermes-gateway tests: one JSON request per stdin line, one JSON answer per
// stdout line, in order.
//   {"op":"encrypt","key":K,"message":M,"id":CORP}      -> {"encrypted":B64}
//   {"op":"decrypt","key":K,"encrypted":B64}            -> {"message":M,"message_b64":..,"id":CORP}
//   {"op":"sign","token":T,"timestamp":S,"nonce":N,"encrypted":B64} -> {"signature":HEX}
//   {"op":"encrypt_file","key":K,"data":B64}            -> {"encrypted":B64}
// encrypt_file is an AI-bot file as WeCom sends it (no envelope): the key
// parsed as @wecom/crypto parses an EncodingAESKey (base64 plus '=', 32
// bytes, IV its first 16), PKCS#7 padding to 32 bytes as the library pads,
// AES-256-CBC by Node's OpenSSL.
// A request the library rejects answers {"error":"..."}.
'use strict';
const readline = require('readline');
const crypto = require('crypto');
const { encrypt, decrypt, getSignature } = require('@wecom/crypto');

function encryptFile(encodingAESKey, data) {
  const key = Buffer.from(`${encodingAESKey}=`, 'base64');
  if (key.length !== 32) throw new Error('invalid encodingAESKey');
  const plain = Buffer.from(data, 'base64');
  const pad = 32 - (plain.length % 32);
  const padded = Buffer.concat([plain, Buffer.alloc(pad, pad)]);
  const cipher = crypto.createCipheriv('aes-256-cbc', key, key.subarray(0, 16));
  cipher.setAutoPadding(false);
  return Buffer.concat([cipher.update(padded), cipher.final()]).toString('base64');
}

function handle(req) {
  switch (req.op) {
    case 'encrypt':
      return { encrypted: encrypt(req.key, req.message, req.id) };
    case 'decrypt': {
      const out = decrypt(req.key, req.encrypted);
      return { message: out.message, message_b64: Buffer.from(out.message).toString('base64'), id: out.id };
    }
    case 'encrypt_file':
      return { encrypted: encryptFile(req.key, req.data) };
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
