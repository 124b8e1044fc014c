//! WeCom's callback encryption ("加解密方案"), wire-compatible with Tencent's
//! `WXBizMsgCrypt` SDKs and the npm `@wecom/crypto` library.
//!
//! - **Signature:** lowercase hex SHA-1 of the lexicographically sorted
//!   concatenation of (token, timestamp, nonce, ciphertext). Compared in
//!   constant time.
//! - **Cipher:** AES-256-CBC, key = base64(EncodingAESKey + "="), IV = the
//!   key's first 16 bytes, PKCS#7 padding to **32**-byte blocks (not AES's 16).
//! - **Plaintext:** 16 random bytes ‖ 4-byte big-endian length ‖ message ‖
//!   receive id (the corp id for a self-built app), which must match.
//!
//! Pure functions over bytes: no clock, no IO. The replay window (the
//! timestamp's age) is the caller's business, because the published sample
//! vectors are from 2016.

use aes::Aes256;
use base64::Engine as _;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD as BASE64};
use cbc::cipher::block_padding::NoPadding;
use cbc::cipher::{BlockModeDecrypt, BlockModeEncrypt, KeyIvInit};
use hermes_runtime::secret::Secret;
use sha1::{Digest, Sha1};
use subtle::ConstantTimeEq;

/// The length of an EncodingAESKey as WeCom shows it (base64 of 32 bytes
/// without the trailing `=`).
pub const ENCODING_AES_KEY_LEN: usize = 43;

/// EncodingAESKeys are 43 random base64 characters, so the last one
/// usually carries non-zero bits past the 32 bytes: decoded leniently, as
/// WeCom's own SDKs do.
const KEY_BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_allow_trailing_bits(true),
);

/// WeCom pads to this block size (its SDKs' `PKCS7Encoder.block_size`).
const PAD_BLOCK: usize = 32;
/// Random prefix + length field.
const HEADER_LEN: usize = 16 + 4;

/// Why a callback could not be verified or decrypted. None is retryable:
/// the request is refused and logged; the reason is safe to log (it holds no
/// key material and no plaintext).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CryptoError {
    /// The EncodingAESKey is not 43 base64 characters decoding to 32 bytes.
    #[error(
        "WECOM_CALLBACK_ENCODING_AES_KEY must be the 43-character EncodingAESKey from the app's \"receive messages\" settings ({0})"
    )]
    BadKey(String),
    /// `msg_signature` does not match: not from WeCom, or a different token.
    #[error("signature mismatch")]
    Signature,
    /// The ciphertext is not base64.
    #[error("ciphertext is not base64")]
    Base64,
    /// The ciphertext is empty or not a whole number of AES blocks.
    #[error("ciphertext length {0} is not a positive multiple of 16")]
    BlockLength(usize),
    /// The decrypted padding is not PKCS#7 (1..=32 equal bytes): wrong key or
    /// a tampered message.
    #[error("bad padding (wrong EncodingAESKey?)")]
    Padding,
    /// The length field points past the end of the plaintext.
    #[error("plaintext is truncated")]
    Truncated,
    /// The receive id inside the plaintext is not our corp id.
    #[error("the message is for another corp id")]
    ReceiveId,
}

/// Token, key and corp id of one self-built app. `Debug` shows the corp id
/// and the token's mask, never the key.
#[derive(Clone)]
pub struct CallbackCrypto {
    token: Secret,
    key: [u8; 32],
    receive_id: String,
}

impl std::fmt::Debug for CallbackCrypto {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallbackCrypto")
            .field("token", &self.token)
            .field("key", &"<redacted>")
            .field("receive_id", &self.receive_id)
            .finish()
    }
}

/// Lowercase hex of `bytes`.
fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    s
}

/// The signature WeCom puts in `msg_signature`.
pub fn signature(token: &str, timestamp: &str, nonce: &str, encrypted: &str) -> String {
    let mut parts = [token, timestamp, nonce, encrypted];
    parts.sort_unstable();
    let mut sha = Sha1::new();
    for p in parts {
        sha.update(p.as_bytes());
    }
    hex(&sha.finalize())
}

/// Decodes an EncodingAESKey into the AES key.
pub fn decode_key(encoding_aes_key: &str) -> Result<[u8; 32], CryptoError> {
    if encoding_aes_key.len() != ENCODING_AES_KEY_LEN {
        return Err(CryptoError::BadKey(format!(
            "it has {} characters",
            encoding_aes_key.chars().count()
        )));
    }
    let bytes = KEY_BASE64
        .decode(format!("{encoding_aes_key}="))
        .map_err(|_| CryptoError::BadKey("it is not base64".to_owned()))?;
    <[u8; 32]>::try_from(bytes.as_slice())
        .map_err(|_| CryptoError::BadKey("it does not decode to 32 bytes".to_owned()))
}

impl CallbackCrypto {
    /// The crypto for an app with `token`, `encoding_aes_key` and
    /// `receive_id` (the corp id).
    pub fn new(token: &str, encoding_aes_key: &str, receive_id: &str) -> Result<Self, CryptoError> {
        Ok(Self {
            token: Secret::new(token),
            key: decode_key(encoding_aes_key)?,
            receive_id: receive_id.to_owned(),
        })
    }

    /// The signature of `encrypted` under this app's token.
    pub fn sign(&self, timestamp: &str, nonce: &str, encrypted: &str) -> String {
        signature(self.token.expose(), timestamp, nonce, encrypted)
    }

    /// Checks `msg_signature` in constant time.
    pub fn verify(
        &self,
        msg_signature: &str,
        timestamp: &str,
        nonce: &str,
        encrypted: &str,
    ) -> Result<(), CryptoError> {
        let expected = self.sign(timestamp, nonce, encrypted);
        // Hex is case-insensitive; WeCom sends lowercase, as we compute.
        let given = msg_signature.to_ascii_lowercase();
        if bool::from(expected.as_bytes().ct_eq(given.as_bytes())) {
            Ok(())
        } else {
            Err(CryptoError::Signature)
        }
    }

    /// Decrypts the base64 `encrypted` text and returns the message bytes
    /// after checking the padding and the receive id.
    pub fn decrypt(&self, encrypted: &str) -> Result<Vec<u8>, CryptoError> {
        let mut buf = BASE64
            .decode(encrypted.trim())
            .map_err(|_| CryptoError::Base64)?;
        self.decrypt_bytes(&mut buf)
    }

    /// [`Self::decrypt`] of raw ciphertext (decrypted in place).
    pub fn decrypt_bytes(&self, buf: &mut [u8]) -> Result<Vec<u8>, CryptoError> {
        if buf.is_empty() || !buf.len().is_multiple_of(16) {
            return Err(CryptoError::BlockLength(buf.len()));
        }
        let iv: [u8; 16] = first_16(&self.key);
        let plain = cbc::Decryptor::<Aes256>::new(&self.key.into(), &iv.into())
            .decrypt_padded::<NoPadding>(buf)
            .map_err(|_| CryptoError::BlockLength(0))?;
        let unpadded = unpad(plain)?;
        if unpadded.len() < HEADER_LEN {
            return Err(CryptoError::Truncated);
        }
        let len_field = [unpadded[16], unpadded[17], unpadded[18], unpadded[19]];
        let msg_len = usize::try_from(u32::from_be_bytes(len_field)).unwrap_or(usize::MAX);
        let rest = &unpadded[HEADER_LEN..];
        if msg_len > rest.len() {
            return Err(CryptoError::Truncated);
        }
        let (message, receive_id) = rest.split_at(msg_len);
        if !bool::from(receive_id.ct_eq(self.receive_id.as_bytes())) {
            return Err(CryptoError::ReceiveId);
        }
        Ok(message.to_vec())
    }

    /// Encrypts `message` with the given 16 random bytes (WeCom's SDKs take
    /// them from a CSPRNG; they only make equal messages encrypt differently)
    /// and returns the base64 ciphertext.
    pub fn encrypt(&self, message: &[u8], random: [u8; 16]) -> String {
        let id = self.receive_id.as_bytes();
        let body_len = HEADER_LEN + message.len() + id.len();
        let pad = PAD_BLOCK - body_len % PAD_BLOCK;
        let mut buf = Vec::with_capacity(body_len + pad);
        buf.extend_from_slice(&random);
        // A message over 4 GiB cannot be expressed; WeCom messages are tiny.
        let len = u32::try_from(message.len()).unwrap_or(u32::MAX);
        buf.extend_from_slice(&len.to_be_bytes());
        buf.extend_from_slice(message);
        buf.extend_from_slice(id);
        // `pad` is 1..=32, so it fits a byte.
        buf.resize(body_len + pad, pad as u8);
        let iv: [u8; 16] = first_16(&self.key);
        let total = buf.len();
        let encrypted = cbc::Encryptor::<Aes256>::new(&self.key.into(), &iv.into())
            .encrypt_padded::<NoPadding>(&mut buf, total)
            .map(<[u8]>::to_vec)
            // Unreachable: the buffer is a whole number of 32-byte blocks.
            .unwrap_or_default();
        BASE64.encode(encrypted)
    }
}

fn first_16(key: &[u8; 32]) -> [u8; 16] {
    let mut iv = [0u8; 16];
    iv.copy_from_slice(&key[..16]);
    iv
}

/// Strips WeCom's PKCS#7 padding (1..=32 bytes, all equal to the count).
fn unpad(plain: &[u8]) -> Result<&[u8], CryptoError> {
    let Some(&last) = plain.last() else {
        return Err(CryptoError::Padding);
    };
    let pad = usize::from(last);
    if pad == 0 || pad > PAD_BLOCK || pad > plain.len() {
        return Err(CryptoError::Padding);
    }
    let (body, padding) = plain.split_at(plain.len() - pad);
    if padding.iter().any(|&b| b != last) {
        return Err(CryptoError::Padding);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    // The sample app of Tencent's WXBizMsgCrypt SDKs (`Sample.py` in the
    // official weworkapi_python, and the same values in the other languages).
    const TOKEN: &str = "hJqcu3uJ9Tn2gXPmxx2w9kkCkCE2EPYo";
    const KEY: &str = "6qkdMrq68nTKduznJYO1A37W2oEgpkMUvkttRToqhUt";
    const CORP: &str = "ww1436e0e65a779aee";

    fn sample() -> CallbackCrypto {
        CallbackCrypto::new(TOKEN, KEY, CORP).unwrap()
    }

    #[test]
    fn official_sample_url_verification() {
        let echostr = "fsi1xnbH4yQh0+PJxcOdhhK6TDXkjMyhEPA7xB2TGz6b+g7xyAbEkRxN/3cNXW9qdqjnoVzEtpbhnFyq6SVHyA==";
        let c = sample();
        c.verify(
            "012bc692d0a58dd4b10f8dfe5c4ac00ae211ebeb",
            "1476416373",
            "47744683",
            echostr,
        )
        .unwrap();
        assert_eq!(c.decrypt(echostr).unwrap(), b"1288432023552776189");
    }

    #[test]
    fn official_sample_message() {
        let encrypted = "Kl7kjoSf6DMD1zh7rtrHjFaDapSCkaOnwu3bqLc5tAybhhMl9pFeK8NslNPVdMwmBQTNoW4mY7AIjeLvEl3NyeTkAgGzBhzTtRLNshw2AEew+kkYcD+Fq72Kt00fT0WnN87hGrW8SqGc+NcT3mu87Ha3dz1pSDi6GaUA6A0sqfde0VJPQbZ9U+3JWcoD4Z5jaU0y9GSh010wsHF8KZD24YhmZH4ch4Ka7ilEbjbfvhKkNL65HHL0J6EYJIZUC2pFrdkJ7MhmEbU2qARR4iQHE7wy24qy0cRX3Mfp6iELcDNfSsPGjUQVDGxQDCWjayJOpcwocugux082f49HKYg84EpHSGXAyh+/oxwaWbvL6aSDPOYuPDGOCI8jmnKiypE+";
        let c = sample();
        c.verify(
            "0c3914025cb4b4d68103f6bfc8db550f79dcf48e",
            "1476422779",
            "1597212914",
            encrypted,
        )
        .unwrap();
        let xml = String::from_utf8(c.decrypt(encrypted).unwrap()).unwrap();
        assert!(xml.contains("<Content>你好</Content>"), "{xml}");
        assert!(xml.contains("<MsgId>1456453720</MsgId>"), "{xml}");
        // One flipped signature digit, or another token, is refused.
        assert_eq!(
            c.verify(
                "0c3914025cb4b4d68103f6bfc8db550f79dcf48f",
                "1476422779",
                "1597212914",
                encrypted
            ),
            Err(CryptoError::Signature)
        );
        let other = CallbackCrypto::new("another-token", KEY, CORP).unwrap();
        assert_eq!(
            other.verify(
                "0c3914025cb4b4d68103f6bfc8db550f79dcf48e",
                "1476422779",
                "1597212914",
                encrypted
            ),
            Err(CryptoError::Signature)
        );
        // The same ciphertext for another corp is refused after decryption.
        let foreign = CallbackCrypto::new(TOKEN, KEY, "ww0000000000000000").unwrap();
        assert_eq!(foreign.decrypt(encrypted), Err(CryptoError::ReceiveId));
    }

    #[test]
    fn round_trip_pads_to_32_byte_blocks() {
        let c = sample();
        for len in [0, 1, 11, 12, 13, 31, 32, 33, 100, 4096] {
            let msg = vec![b'x'; len];
            let enc = c.encrypt(&msg, [7; 16]);
            let raw = BASE64.decode(&enc).unwrap();
            assert_eq!(raw.len() % 32, 0, "len {len}");
            assert_eq!(c.decrypt(&enc).unwrap(), msg);
        }
    }

    #[test]
    fn bad_keys_are_refused_with_the_setting_named() {
        for bad in ["", "short", &"a".repeat(44), &"!".repeat(43)] {
            let e = CallbackCrypto::new(TOKEN, bad, CORP).unwrap_err();
            assert!(matches!(e, CryptoError::BadKey(_)), "{bad}: {e:?}");
            assert!(e.to_string().contains("WECOM_CALLBACK_ENCODING_AES_KEY"));
        }
    }

    #[test]
    fn malformed_ciphertexts_are_errors() {
        let c = sample();
        assert_eq!(c.decrypt("not base64!"), Err(CryptoError::Base64));
        assert_eq!(c.decrypt(""), Err(CryptoError::BlockLength(0)));
        assert_eq!(
            c.decrypt(&BASE64.encode([0u8; 15])),
            Err(CryptoError::BlockLength(15))
        );
        // Random blocks decrypt to garbage: bad padding or a bad length.
        let e = c.decrypt(&BASE64.encode([0u8; 64])).unwrap_err();
        assert!(
            matches!(e, CryptoError::Padding | CryptoError::Truncated),
            "{e:?}"
        );
        // A good ciphertext under the wrong key fails the padding (or, with
        // a 1-in-256 chance, the length/corp checks) — never decrypts.
        let other = CallbackCrypto::new(TOKEN, &"A".repeat(43), CORP).unwrap();
        assert!(other.decrypt(&c.encrypt(b"hello", [1; 16])).is_err());
    }

    #[test]
    fn bad_padding_is_refused() {
        assert_eq!(unpad(&[1, 2, 3, 0]), Err(CryptoError::Padding));
        assert_eq!(unpad(&[1, 2, 3, 33]), Err(CryptoError::Padding));
        assert_eq!(unpad(&[1, 2, 2, 3]), Err(CryptoError::Padding));
        assert_eq!(unpad(&[9, 9]), Err(CryptoError::Padding));
        assert_eq!(unpad(&[1, 3, 3, 3]).unwrap(), &[1]);
        assert_eq!(unpad(&[]), Err(CryptoError::Padding));
    }

    #[test]
    fn debug_hides_the_secrets() {
        let d = format!("{:?}", sample());
        assert!(!d.contains(TOKEN) && !d.contains(KEY), "{d}");
        assert!(!d.contains("cu3uJ9Tn2gXPmxx2w9kkCkCE2"), "{d}");
        assert!(d.contains(CORP), "{d}");
    }
}
