//! A request's head joined to its body on the wire.
//!
//! ureq transmits a request's head, then its body through the output buffer,
//! each with a write of its own. With `TCP_NODELAY` (ureq's default) every
//! write is a segment, and on loopback a pass through the TCP stack and a
//! wake-up of the server: a tool turn's request (≈ 18 KB through the 16 KiB
//! buffer) took three `sendto`s. [`Held`] keeps a short write (a head) back
//! and sends it in front of the next one, in the same write; whatever of that
//! write no longer fits the buffer is kept back in turn, and what is kept is
//! sent before the connection waits for input (a server does not answer what
//! it has not received). The bytes and their order are unchanged.

use ureq::Error;
use ureq::unversioned::transport::{NextTimeout, Transport};

/// The longest write that is kept back (a request head with room to spare;
/// never more than half the output buffer, so a held write and the part of
/// the next one that fits always go together).
const HOLD_MAX: usize = 2048;

/// The bytes of a write kept back for the next (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Held(Vec<u8>);

impl Held {
    /// Transmits the first `amount` bytes of `inner`'s output buffer, after
    /// what is held; or holds them, when short and nothing is held.
    pub(crate) fn transmit<T: Transport + ?Sized>(
        &mut self,
        inner: &mut T,
        amount: usize,
        timeout: NextTimeout,
    ) -> Result<(), Error> {
        let out = inner.buffers().output();
        let amount = amount.min(out.len());
        if amount == 0 {
            return Ok(());
        }
        if self.0.is_empty() {
            if amount <= HOLD_MAX.min(out.len() / 2) {
                self.0.extend_from_slice(&out[..amount]);
                return Ok(());
            }
            return inner.transmit_output(amount, timeout);
        }
        // Held bytes first, then as much of the new ones as fits behind
        // them; the rest (no longer than what was held) is held next.
        let held = self.0.len();
        let now = amount.min(out.len().saturating_sub(held));
        let rest = out[now..amount].to_vec();
        shift_right(&mut out[..held + now], held);
        out[..held].copy_from_slice(&self.0);
        self.0 = rest;
        inner.transmit_output(held + now, timeout)
    }

    /// Whether nothing is held.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Sends what is held, if anything (before waiting for input).
    pub(crate) fn flush<T: Transport + ?Sized>(
        &mut self,
        inner: &mut T,
        timeout: NextTimeout,
    ) -> Result<(), Error> {
        if self.0.is_empty() {
            return Ok(());
        }
        let held = std::mem::take(&mut self.0);
        inner.buffers().output()[..held.len()].copy_from_slice(&held);
        inner.transmit_output(held.len(), timeout)
    }
}

/// Moves the first `buf.len() - by` bytes of `buf` `by` places to the
/// right, in pieces of `by` bytes from the end: no piece overlaps where it
/// goes, so each is a forward copy. (One overlapping `copy_within` is
/// musl's `memmove` backwards, a byte at a time: 16 k steps for a 16 KiB
/// body.)
fn shift_right(buf: &mut [u8], by: usize) {
    if by == 0 {
        return;
    }
    let mut end = buf.len().saturating_sub(by);
    while end > 0 {
        let start = end.saturating_sub(by);
        buf.copy_within(start..end, start + by);
        end = start;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::Held;
    use ureq::Error;
    use ureq::unversioned::transport::{Buffers, LazyBuffers, NextTimeout, Transport};

    /// A transport that records each write it is asked for.
    #[derive(Debug)]
    struct Recording {
        buffers: LazyBuffers,
        writes: Vec<Vec<u8>>,
    }

    impl Recording {
        fn new(output: usize) -> Self {
            Recording {
                buffers: LazyBuffers::new(1024, output),
                writes: Vec::new(),
            }
        }
    }

    impl Transport for Recording {
        fn buffers(&mut self) -> &mut dyn Buffers {
            &mut self.buffers
        }
        fn transmit_output(&mut self, amount: usize, _: NextTimeout) -> Result<(), Error> {
            let out = self.buffers.output()[..amount].to_vec();
            self.writes.push(out);
            Ok(())
        }
        fn await_input(&mut self, _: NextTimeout) -> Result<bool, Error> {
            Ok(false)
        }
        fn is_open(&mut self) -> bool {
            true
        }
    }

    /// Writes `parts` as ureq does (each into the output buffer, then a
    /// transmit), then the wait's flush; the writes that reached the wire.
    fn send(output: usize, parts: &[Vec<u8>]) -> Vec<Vec<u8>> {
        let mut wire = Recording::new(output);
        let mut held = Held::default();
        for part in parts {
            wire.buffers.output()[..part.len()].copy_from_slice(part);
            held.transmit(&mut wire, part.len(), NextTimeout::default())
                .unwrap();
        }
        held.flush(&mut wire, NextTimeout::default()).unwrap();
        wire.writes
    }

    fn bytes(n: usize, seed: u8) -> Vec<u8> {
        (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
    }

    #[test]
    fn shifting_right_keeps_every_byte_in_order() {
        for len in 0..40 {
            for by in 0..=len {
                let mut buf: Vec<u8> = (0..len as u8).collect();
                super::shift_right(&mut buf, by);
                let want: Vec<u8> = (0..(len - by) as u8).collect();
                assert_eq!(&buf[by..], &want[..], "len {len} by {by}");
            }
        }
    }

    #[test]
    fn a_head_goes_out_with_its_body_in_one_write() {
        let (head, body) = (bytes(300, 1), bytes(5000, 2));
        let wire = send(16 * 1024, &[head.clone(), body.clone()]);
        assert_eq!(wire, vec![[head, body].concat()]);
    }

    #[test]
    fn a_body_beyond_the_buffer_takes_one_write_fewer() {
        // ureq: the head, then the body through the 16 KiB buffer (16 KiB
        // and 2 KiB) — three writes; joined, two, every byte in order.
        let out = 16 * 1024;
        let parts = [bytes(300, 1), bytes(out, 2), bytes(2048, 3)];
        let wire = send(out, &parts);
        assert_eq!(
            wire.len(),
            2,
            "{:?}",
            wire.iter().map(Vec::len).collect::<Vec<_>>()
        );
        assert!(wire.iter().all(|w| w.len() <= out));
        assert_eq!(wire.concat(), parts.concat());
    }

    #[test]
    fn a_request_without_a_body_goes_out_before_the_wait() {
        let head = bytes(200, 4);
        assert_eq!(send(16 * 1024, std::slice::from_ref(&head)), vec![head]);
    }

    #[test]
    fn long_writes_are_not_held_and_the_order_always_holds() {
        let out = 4096;
        for parts in [
            vec![bytes(3000, 1), bytes(10, 2)],
            vec![bytes(10, 1), bytes(20, 2), bytes(4096, 3), bytes(1, 4)],
            vec![bytes(2048, 1), bytes(4096, 2), bytes(4096, 3)],
            vec![bytes(0, 1), bytes(7, 2)],
        ] {
            let wire = send(out, &parts);
            assert_eq!(wire.concat(), parts.concat());
            assert!(wire.iter().all(|w| !w.is_empty() && w.len() <= out));
        }
        let wire = send(out, &[bytes(3000, 1)]);
        assert_eq!(
            wire.len(),
            1,
            "a write longer than half the buffer is sent at once"
        );
    }
}
