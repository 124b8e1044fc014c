//! hermes-core on a microcontroller: one agent turn with no OS.
//!
//! The model is scripted: its answers are the server-sent-event bytes a real
//! provider sends, fed to the core's SSE decoder 61 bytes at a time as a UART
//! or modem would deliver them, and every request is encoded by the core's
//! request encoder as a transport would send it. The tools are a no-op and
//! `set_led`, whose JSON arguments are decoded with `serde-json-core` into a
//! fixed-size struct (no heap). The heap is a bump allocator over a static
//! arena; the program reports the heap and stack it used over semihosting and
//! exits with the result (qemu: `cargo run --release` in this directory).

#![no_std]
#![no_main]

extern crate alloc;

mod bump;

use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use cortex_m_rt::entry;
use cortex_m_semihosting::{debug, hprintln};
use hermes_core::codec::{RequestOptions, SseDecoder, encode_request};
use hermes_core::{
    Agent, ChatRequest, Completion, Model, ModelError, ModelErrorKind, StopReason, StreamSink,
    Tool, ToolContext, ToolError, ToolRegistry, ToolSpec,
};
use serde::Deserialize;

/// Heap for one turn: the peak measured in qemu is reported on every run.
const HEAP_BYTES: usize = 32 * 1024;

#[global_allocator]
static HEAP: bump::Bump<HEAP_BYTES> = bump::Bump::new();

/// The answers of the scripted provider, one SSE stream per model call.
const SCRIPT: [&[u8]; 2] = [
    // Two parallel tool calls; `set_led`'s arguments arrive in fragments.
    b"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"index\":0,\"id\":\"call_led\",\"type\":\"function\",\"function\":{\"name\":\"set_led\",\"arguments\":\"\"}}]},\"finish_reason\":null}]}\n\n\
data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"led\\\":2,\"}}]},\"finish_reason\":null}]}\n\n\
data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\"on\\\":true,\\\"label\\\":\\\"st\\\\u00e4tus\\\"}\"}}]},\"finish_reason\":null}]}\n\n\
data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"call_noop\",\"type\":\"function\",\"function\":{\"name\":\"noop\",\"arguments\":\"{}\"}}]},\"finish_reason\":null}]}\n\n\
data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n\
data: [DONE]\n\n",
    // The answer, streamed, with a final usage chunk.
    b"data: {\"id\":\"c2\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n\
data: {\"id\":\"c2\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"LED 2 is \"},\"finish_reason\":null}]}\n\n\
data: {\"id\":\"c2\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"on.\"},\"finish_reason\":null}]}\n\n\
data: {\"id\":\"c2\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
data: {\"id\":\"c2\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":40,\"completion_tokens\":9,\"total_tokens\":49}}\n\n\
data: [DONE]\n\n",
];

/// Bytes per feed: what a UART DMA buffer might hold, deliberately odd so
/// that events, lines and escapes split everywhere.
const FEED_BYTES: usize = 61;

/// A provider that answers from [`SCRIPT`].
struct ScriptedModel {
    calls: AtomicUsize,
    /// Largest request body encoded, in bytes.
    largest_request: AtomicUsize,
}

impl Model for ScriptedModel {
    fn complete(
        &self,
        request: &ChatRequest<'_>,
        sink: &mut dyn StreamSink,
    ) -> Result<Completion, ModelError> {
        let call = self.calls.fetch_add(1, Ordering::Relaxed);
        let mut body = Vec::new();
        let mut opts = RequestOptions::new("scripted");
        opts.stream = true;
        encode_request(&opts, request, &mut body)
            .map_err(|_| ModelError::new(ModelErrorKind::Request, "request encoding failed"))?;
        self.largest_request
            .fetch_max(body.len(), Ordering::Relaxed);
        // The second call must carry both tool results back to the model.
        if call == 1
            && !(contains(&body, b"LED 2 on (st\xc3\xa4tus)") && contains(&body, b"noop: ok"))
        {
            return Err(ModelError::new(
                ModelErrorKind::Protocol,
                "tool results missing from the request",
            ));
        }
        let stream = SCRIPT
            .get(call)
            .ok_or_else(|| ModelError::new(ModelErrorKind::Protocol, "script exhausted"))?;
        let mut decoder = SseDecoder::new();
        for piece in stream.chunks(FEED_BYTES) {
            decoder
                .feed(piece, sink)
                .map_err(|_| ModelError::new(ModelErrorKind::Protocol, "bad stream"))?;
        }
        decoder
            .finish()
            .map_err(|_| ModelError::new(ModelErrorKind::Protocol, "stream cut short"))
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Does nothing, successfully.
struct Noop(ToolSpec);

impl Tool for Noop {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }
    fn call(&self, _arguments: &str, _ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        Ok(String::from("noop: ok"))
    }
}

/// The state of eight LEDs, one bit each (a GPIO port on real hardware).
static LEDS: AtomicU8 = AtomicU8::new(0);

/// `set_led`'s arguments, decoded without the heap.
#[derive(Deserialize)]
struct SetLedArgs {
    led: u8,
    on: bool,
    #[serde(default)]
    label: heapless::String<16>,
}

struct SetLed(ToolSpec);

impl Tool for SetLed {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }
    fn call(&self, arguments: &str, _ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        // Escapes (`\u00e4`) are decoded into this scratch buffer.
        let mut scratch = [0u8; 32];
        let (args, _) = serde_json_core::from_str_escaped::<SetLedArgs>(arguments, &mut scratch)
            .map_err(|e| ToolError::Failed(alloc::format!("bad arguments: {e}")))?;
        if args.led >= 8 {
            return Err(ToolError::Failed(alloc::format!(
                "no LED {} (0-7)",
                args.led
            )));
        }
        let bit = 1u8 << args.led;
        if args.on {
            LEDS.fetch_or(bit, Ordering::Relaxed);
        } else {
            LEDS.fetch_and(!bit, Ordering::Relaxed);
        }
        Ok(alloc::format!(
            "LED {} {} ({})",
            args.led,
            if args.on { "on" } else { "off" },
            args.label
        ))
    }
}

fn tools() -> Result<ToolRegistry, &'static str> {
    let schema = |s: &str| serde_json::from_str(s).map_err(|_| "bad schema");
    Ok(ToolRegistry::new()
        .with(Noop(ToolSpec::new(
            "noop",
            "Does nothing.",
            schema(r#"{"type":"object","properties":{}}"#)?,
        )))
        .with(SetLed(ToolSpec::new(
            "set_led",
            "Switches an LED.",
            schema(
                r#"{"type":"object","properties":{"led":{"type":"integer"},"on":{"type":"boolean"},"label":{"type":"string"}},"required":["led","on"]}"#,
            )?,
        ))))
}

/// One turn; `Err` names what went wrong.
fn run_turn() -> Result<usize, &'static str> {
    let model = Arc::new(ScriptedModel {
        calls: AtomicUsize::new(0),
        largest_request: AtomicUsize::new(0),
    });
    let agent = Agent::new(
        model.clone(),
        Arc::new(tools()?),
        "You drive a board's LEDs.",
    )
    .with_max_iterations(4);
    let outcome = agent.run_conversation("Switch LED 2 on.", Vec::new());
    if let StopReason::ModelError(_) = outcome.stop {
        return Err("the model call failed");
    }
    if outcome.stop != StopReason::Completed {
        return Err("the turn did not complete");
    }
    if outcome.final_text != "LED 2 is on." || outcome.iterations != 2 {
        return Err("unexpected answer");
    }
    // user, assistant with two calls, two results, answer
    if outcome.messages.len() != 5 || outcome.usage.total_tokens != 49 {
        return Err("unexpected ledger");
    }
    if LEDS.load(Ordering::Relaxed) != 0b100 {
        return Err("LED 2 is not on");
    }
    hprintln!("answer: {}", outcome.final_text);
    Ok(model.largest_request.load(Ordering::Relaxed))
}

/// Stack bytes ever used: cortex-m-rt painted the stack before `main`.
fn stack_used() -> usize {
    unsafe extern "C" {
        static _stack_start: u32;
        static _stack_end: u32;
    }
    let (top, bottom) = (
        core::ptr::addr_of!(_stack_start) as usize,
        core::ptr::addr_of!(_stack_end) as usize,
    );
    let mut addr = bottom;
    while addr < top {
        // SAFETY: the painted region lies between the two linker symbols.
        if unsafe { core::ptr::read_volatile(addr as *const u32) } != cortex_m_rt::STACK_PAINT_VALUE
        {
            break;
        }
        addr += 4;
    }
    top - addr
}

/// Two turns with the heap reset in between, as a firmware serving one
/// request after another would: the second needs exactly what the first did.
fn run() -> Result<(), &'static str> {
    let request_bytes = run_turn()?;
    let first_peak = HEAP.peak();
    // SAFETY: everything the first turn allocated was dropped in `run_turn`.
    unsafe { HEAP.reset() };
    run_turn()?;
    if HEAP.peak() != first_peak {
        return Err("the second turn needed more heap than the first");
    }
    hprintln!(
        "heap peak {} of {} bytes; stack {} bytes; largest request {} bytes",
        first_peak,
        HEAP.capacity(),
        stack_used(),
        request_bytes
    );
    Ok(())
}

#[entry]
fn main() -> ! {
    match run() {
        Ok(()) => {
            hprintln!("ok");
            debug::exit(debug::EXIT_SUCCESS);
        }
        Err(what) => {
            hprintln!("FAILED: {}", what);
            debug::exit(debug::EXIT_FAILURE);
        }
    }
    loop {
        cortex_m::asm::wfi();
    }
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    hprintln!("panic: {}", info);
    debug::exit(debug::EXIT_FAILURE);
    loop {
        cortex_m::asm::wfi();
    }
}
